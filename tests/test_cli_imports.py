"""`tickwork --help` and `tickwork status` import only what they use (no timing asserted).

An operator waits on every start-up of the command; importing the web stack, the agent
SDK, a PostgreSQL driver or Alembic for a command that needs none of them costs most of
a second. Each case runs in a fresh interpreter, so what earlier tests imported cannot
hide a heavy import, and lists the watched modules that ended up in `sys.modules`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TICKWORK = str(Path(sys.executable).with_name("tickwork"))

SERVICES = ("strands", "fastapi", "uvicorn", "aiohttp", "apprise", "openai", "httpx")
"""The agent SDK, the web stack and the notifiers: only serving and running ticks need them."""

REPORT = """
import json, sys
from harness.cli import main
sys.argv = ["tickwork", *sys.argv[1:]]
if len(sys.argv) > 1:
    try:
        main()
    except SystemExit as exc:
        assert not exc.code, exc.code
watched = json.loads(WATCHED)
print(json.dumps(sorted(name for name in watched if name in sys.modules)))
"""


def loaded(cwd: Path, watched: tuple[str, ...], *args: str) -> list[str]:
    """The watched modules loaded after importing the CLI and running `tickwork ARGS`."""
    code = REPORT.replace("WATCHED", repr(json.dumps(watched)))
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


def test_importing_the_cli_imports_no_stage_and_no_service(tmp_path: Path) -> None:
    stages = ("harness.config", "harness.store", "sqlalchemy", "pydantic_settings", "pydantic")
    assert loaded(tmp_path, (*SERVICES, *stages, "psycopg", "rich.progress")) == []


def test_help_imports_no_stage_and_no_service(tmp_path: Path) -> None:
    assert loaded(tmp_path, (*SERVICES, "harness.store", "sqlalchemy", "psycopg"), "--help") == []


def test_status_of_a_sqlite_store_imports_no_service_driver_or_migration_tool(
    tmp_path: Path,
) -> None:
    subprocess.run([TICKWORK, "init"], cwd=tmp_path, check=True, capture_output=True)
    heavy = (*SERVICES, "psycopg", "alembic", "genai_prices", "harness.execution", "workers")
    unused = (
        "harness.contracts.payload",  # the runner's and the worker's: a front loads it on use
        "jsonschema",  # no level has an output schema
        "sqlalchemy.dialects.postgresql",
        "psutil",  # the reconciler's
        "harness.scheduling.service",
        "harness.routing",  # the wave claims'
    )
    assert loaded(tmp_path, (*heavy, *unused), "status") == [], "an empty store: nothing to price"
