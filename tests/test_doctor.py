"""`tickwork doctor` against real things: stores, a running scheduler and serve, sockets.

Each check is read as the operator reads it: the row it prints and, for a failure, the
line saying what to do.
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from pathlib import Path

from harness.devtools.fake_llm import FakeUpstream
from harness.store import beats, open_store
from harness.store.engine import create_store_engine
from harness.store.migrate import downgrade
from tests.commands import (
    COLD,
    ForkedCommand,
    Output,
    environment,
    forked,
    forked_each,
    free_port,
    write_config,
)
from tests.store_support import migrated_sqlite
from tests.waiting import wait_until

KEY = "sk-doctor-test-key-0123456789"

LEVELS = """
[api]
port = {port}
[levels.min]
every = "1h"
prompt = "Anything new?"
model = "fake-model"
[levels.claude]
every = "1h"
prompt = "Anything new?"
model = "fake-model"
api = "anthropic"
"""


def configured(folder: Path, port: int, agents: str = "") -> Path:
    """A configuration in `folder` serving on `port`, the agent CLIs looked for in `agents`.

    Its levels tick hourly, so no tick of a service on it comes due within a test: the
    cold launcher, which starts nothing until asked, spares the service the warm one's
    fork server and its imports for ticks that never start.
    """
    folder.mkdir()
    extra = f'[agents]\ndir = "{agents}"\n' if agents else ""
    return write_config(folder, extra + LEVELS.format(port=port), runner=COLD)


def rows(output: str) -> dict[str, str]:
    """Check name -> its row as printed."""
    found = {}
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if len(cells) == 3:
            found[cells[0]] = f"{cells[1]} {cells[2]}"
    return found


def test_doctor_names_each_failure_and_what_to_do(tmp_path: Path, fake: FakeUpstream) -> None:
    """An old schema; a current store with no scheduler, a dead upstream, a key missing.

    The serve port is taken by another program, and the agent CLIs are not installed
    where these configurations look, which fails nothing, as no level uses them.
    """
    stale = configured(tmp_path / "stale", free_port(), str(tmp_path))
    engine = create_store_engine(migrated_sqlite(tmp_path / "stale"))
    downgrade(engine, "0005")
    engine.dispose()
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        broken = configured(tmp_path / "broken", other.getsockname()[1], str(tmp_path))
        env = {
            "OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
            "OPENAI_API_KEY": KEY,
            "ANTHROPIC_BASE_URL": fake.origin,
        }
        old, now, as_json = forked_each(
            tmp_path,
            [
                ["--config", str(stale), "doctor"],
                ["--config", str(broken), "doctor"],
                ["--config", str(broken), "doctor", "--json"],
            ],
            env,
            unset=("ANTHROPIC_API_KEY",),
        )
    assert old.returncode == 1, old.stdout + old.stderr
    found = rows(old.stdout)
    assert (
        found["store"].startswith("FAIL ")
        and "at schema 0005, this tickwork needs" in found["store"]
    ), old.stdout
    assert "  store: run `tickwork migrate`" in old.stdout
    assert found["scheduler"] == "FAIL cannot tell: the store cannot be read"
    assert now.returncode == 1, now.stdout + now.stderr
    found = rows(now.stdout)
    assert found["store"].startswith("ok ") and "(current)" in found["store"]
    assert found["scheduler"] == "FAIL none has ever beaten in this store"
    assert "  scheduler: start one: `tickwork run`" in now.stdout
    dead = found["upstream openai-chat of min"]
    assert dead.startswith("FAIL 127.0.0.1:") and "does not answer" in dead, dead
    assert (
        "  upstream openai-chat of min: start it, or point OPENAI_BASE_URL elsewhere" in now.stdout
    )
    keyless = found["upstream anthropic of claude"]
    assert (
        keyless
        == f"FAIL 127.0.0.1:{fake.origin.rsplit(':', 1)[1]} answers, ANTHROPIC_API_KEY is not set"
    )
    assert "  upstream anthropic of claude: set ANTHROPIC_API_KEY in the environment" in now.stdout
    port = next(value for name, value in found.items() if name.startswith("serve port"))
    assert port.startswith("FAIL taken by another program"), port
    assert "4 check(s) failed; what to do:" in now.stdout
    assert found["agent claude-code"].endswith("(no level uses it)")
    assert KEY not in now.stdout + now.stderr + as_json.stdout
    answer = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and answer["ok"] is False
    failed = {check["check"]: check["fix"] for check in answer["checks"] if not check["ok"]}
    assert failed["scheduler"].startswith("start one: `tickwork run`"), failed
    assert len(failed) == 4, failed


def answers(port: int) -> bool:
    """Whether the API on the port has answered a request."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=30):
            return True
    except OSError:
        return False


def test_doctor_passes_with_a_scheduler_and_serve_running(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """The scheduler serves its fake to the OpenAI level; the Anthropic one has its key."""
    port = free_port()
    config = configured(tmp_path / "ok", port)
    own = environment(TICKWORK_CONFIG=str(config))
    own.pop("OPENAI_BASE_URL", None)
    piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    service = Output(ForkedCommand(config.parent, ["run"], own, **piped))
    server = Output(ForkedCommand(config.parent, ["serve", "--port", str(port)], own, **piped))
    store = open_store(migrated_sqlite(tmp_path / "ok"))
    try:
        shared = service.wait_for("  upstream  openai-chat: tickwork's fake at ").split(" at ")[1]
        wait_until(lambda: [b for b in beats(store) if b.role == "scheduler"], "a heartbeat")
        server.wait_for("tickwork API and dashboard on ")
        # The banner comes when the port is bound; the app answers a moment later.
        wait_until(lambda: answers(port), "tickwork serve to answer")
        env = {
            "TICKWORK_CONFIG": str(config),
            "ANTHROPIC_BASE_URL": fake.origin,
            "ANTHROPIC_API_KEY": KEY,
        }
        text = forked(config.parent, "doctor", env=env, unset=("OPENAI_BASE_URL",))
    finally:
        server.stop()
        service.stop()
        store.close()
    assert text.returncode == 0, text.stdout + text.stderr
    found = rows(text.stdout)
    assert found["scheduler"].startswith("ok alive: pid "), found
    assert found["upstream openai-chat of min"] == (
        f"ok tickwork's fake at {shared.split()[0]} (the running scheduler's)"
    )
    assert found["upstream anthropic of claude"].endswith("answers, ANTHROPIC_API_KEY is set")
    assert found[f"serve port 127.0.0.1:{port}"] == "ok taken by a `tickwork serve`, which answers"
    assert text.stdout.rstrip().endswith("all checks passed")
    assert KEY not in text.stdout
