"""`tickwork --help`, `status`, `ticks` and `show` import only what they use (no timing asserted).

An operator waits on every start-up of the command; importing the web stack, the agent
SDK, a PostgreSQL driver or Alembic for a command that needs none of them costs most of
a second. Each case runs in a fresh interpreter, so what earlier tests imported cannot
hide a heavy import, and lists the watched modules that ended up in `sys.modules`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.cli.answered import command_answers
from harness.config import load_settings, service_socket
from harness.devtools.example_ticks import fill_example_store
from harness.local_socket import serve
from harness.store import open_store
from tests.commands import forked, forked_each

TICKWORK = str(Path(sys.executable).with_name("tickwork"))

SERVICES = ("strands", "fastapi", "uvicorn", "aiohttp", "apprise", "openai", "httpx")
"""The agent SDK, the web stack and the notifiers: only serving and running ticks need them."""

REPORT = """
import json, sys
from harness.cli import main
sys.argv = ["tickwork", *sys.argv[1:]]
code = 0
if len(sys.argv) > 1:
    try:
        main()
    except SystemExit as exc:
        code = exc.code or 0
watched = json.loads(WATCHED)
print(json.dumps(sorted(name for name in watched if name in sys.modules)))
sys.exit(code)
"""


def loaded(cwd: Path, watched: tuple[str, ...], *args: str) -> list[str]:
    """The watched modules loaded after importing the CLI and running `tickwork ARGS`."""
    return printed(cwd, watched, *args)[1]


def test_importing_the_cli_imports_no_stage_and_no_service(tmp_path: Path) -> None:
    stages = ("harness.config", "harness.store", "sqlalchemy", "pydantic_settings", "pydantic")
    assert loaded(tmp_path, (*SERVICES, *stages, "psycopg", "rich.progress")) == []


def test_help_imports_no_stage_no_service_and_no_rich_console(tmp_path: Path) -> None:
    """Nor pydantic: Typer coerces an unset option through an adapter built on its value."""
    watched = (*SERVICES, "harness.store", "sqlalchemy", "psycopg", "rich.console", "pydantic")
    assert loaded(tmp_path, watched, "--help") == []


def test_a_command_runs_from_an_app_holding_it_alone_and_the_roots_help_from_all() -> None:
    """Typer builds each registered command before it runs one: only the one asked for."""
    from harness.cli import app  # every command module, each registering its commands
    from harness.cli.app import for_arguments

    alone = for_arguments(["-c", "status", "status", "--json"])
    assert [info.name or info.callback.__name__ for info in alone.registered_commands] == ["status"]
    assert alone.registered_groups == [] and len(app.registered_commands) > 20
    assert [group.name for group in for_arguments(["spool", "pending"]).registered_groups] == [
        "spool"
    ]
    assert for_arguments(["--help"]) is not app and for_arguments(["no-such-command"]) is not app


def test_the_roots_help_and_an_unknown_commands_error_are_the_whole_apps(tmp_path: Path) -> None:
    """The root lists stand-ins of every command: what it prints is the whole app's."""
    from typer.testing import CliRunner

    from harness.cli import app
    from harness.cli.app import for_arguments

    runner = CliRunner()
    for arguments in (["--help"], [], ["no-such-command"], ["statu"], ["-c", "x"]):
        whole = runner.invoke(app, arguments)
        listed = runner.invoke(for_arguments(arguments), arguments)
        assert (listed.exit_code, listed.output) == (whole.exit_code, whole.output), arguments
    listed = runner.invoke(for_arguments(["--help"]), ["--help"]).output
    assert "  status       The store, levels, ticks in flight" in listed
    assert "  spool        The local spool of events" in listed


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


WATCHED_STORE = (
    "sqlalchemy",
    "pydantic",
    "pydantic_settings",
    "harness.config.settings",
    "harness.store",
    "harness.contracts.events",
)
"""What reading the store loads: an answered command loads none of it."""


@contextmanager
def answering(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A running service's answers (`command_answers`) in this folder; what it reported."""
    monkeypatch.chdir(folder)  # the socket is named after the folder the service runs in
    config = load_settings(None)
    store = open_store(config.store.url)
    reports: list[str] = []
    stopping = threading.Event()
    serving = threading.Thread(
        target=command_answers(config, folder / "tickwork.toml", store, reports.append),
        args=(stopping,),
    )
    serving.start()
    try:
        yield reports
    finally:
        stopping.set()
        serving.join()
        store.close()


def test_status_answered_by_a_running_service_loads_no_store_and_prints_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service's answer is what the command would print from the store itself.

    With the file broken on disk the service still answers, with what it runs, and says
    first that the file is bad; alone, the command refuses it (exit 2).
    """
    subprocess.run([TICKWORK, "init"], cwd=tmp_path, check=True, capture_output=True)
    file = tmp_path / "tickwork.toml"
    valid = file.read_text()
    broken = valid.replace("[levels.min]", "[levels.min]\nsurprise = 1", 1)
    with answering(tmp_path, monkeypatch) as reports:
        answered, modules = printed(tmp_path, WATCHED_STORE, "status")
        assert modules == [], "the service answered: nothing of the store's read was loaded"
        verbose, _ = printed(tmp_path, WATCHED_STORE, "status", "--verbose")
        assert "projection ticks" in verbose and "projection " not in answered, "internals"
        file.write_text(broken)  # the service reads the file as it is now, as the command would
        despite = subprocess.run([TICKWORK, "status"], cwd=tmp_path, capture_output=True, text=True)
    assert reports == []
    refused_alone = subprocess.run(
        [TICKWORK, "status"], cwd=tmp_path, capture_output=True, text=True
    )
    assert refused_alone.returncode == 2
    assert "unknown key 'surprise' in [levels.min]" in refused_alone.stderr
    assert despite.returncode == 0, despite.stderr
    bad, _, rest = despite.stdout.partition("(fix the file and it reloads)\n")
    said = "tickwork.toml: invalid configuration\n  unknown key 'surprise' in [levels.min]\n"
    assert bad.startswith(said), bad
    assert "the file is not in force: this is the running service's status" in bad
    slot = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # the next slot may move between
    assert "(in force; the file on disk is not)" in rest, "the levels are not the file's"
    served = rest.replace("(in force; the file on disk is not)", "(this file)")
    assert " ".join(slot.sub("<slot>", served).split()) == " ".join(
        slot.sub("<slot>", answered).split()
    ), "the rest is the status the file would give (its padding aside)"
    file.write_text(valid)
    alone, modules = printed(tmp_path, WATCHED_STORE, "status")
    assert modules == sorted(WATCHED_STORE), "no service: the command read the store itself"
    assert slot.sub("<slot>", answered) == slot.sub("<slot>", alone)


def test_ticks_and_show_answered_by_a_running_service_print_what_they_read_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages, stories, spend, JSON, a bad option and an unknown tick: the same both ways.

    A terminal's width and colours are the asker's: `COLUMNS` reaches the service's drawing.
    What an answer loads is seen in a fresh interpreter (none of the store's read: the
    service answered); what the command prints alone runs forked.
    """
    subprocess.run([TICKWORK, "init"], cwd=tmp_path, check=True, capture_output=True)
    first = fill_example_store(tmp_path, 3)
    asked = [
        ["ticks"],
        ["ticks", "--json", "--limit", "2"],
        ["show", first],
        ["show", first[:-4], "--json"],
        ["show", first, "--spend"],
    ]
    refused = [["ticks", "--status", "nope"], ["ticks", "--since", "yesterday"], ["show", "nope"]]
    with answering(tmp_path, monkeypatch) as reports:
        answered = [printed(tmp_path, WATCHED_STORE, *arguments) for arguments in asked]
        refusals = [reported(tmp_path, WATCHED_STORE, *arguments) for arguments in refused]
        narrow, narrow_loaded = reported(tmp_path, WATCHED_STORE, "status", env={"COLUMNS": "40"})
    assert reports == []
    assert [modules for _, modules in refusals] == [[]] * len(refused), "the service answered"
    assert narrow_loaded == [], "the service answered, drawing for the asker's 40 columns"
    # Only a number given (`--limit`) is coerced by Typer, through pydantic.
    loaded_answered = [[], ["pydantic"], [], [], []]
    assert [modules for _, modules in answered] == loaded_answered, "the service answered"
    alone = forked_each(tmp_path, asked)
    for arguments, (said, _), read in zip(asked, answered, alone, strict=True):
        assert read.returncode == 0, read.stderr
        assert said + "\n" == read.stdout, arguments
    assert first in answered[0][0]
    assert json.loads(answered[1][0])["next_before"] is not None, "a page of 2 of 3 ticks"
    for arguments, (answer, _), read in zip(
        refused, refusals, forked_each(tmp_path, refused), strict=True
    ):
        assert (answer.returncode, answer.stdout, answer.stderr) == (
            read.returncode,
            read.stdout,
            read.stderr,
        ), arguments
        assert answer.returncode == 2, arguments
    slot = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # the next slot may move between
    read_narrow = forked(tmp_path, "status", env={"COLUMNS": "40"})
    assert slot.sub("<slot>", narrow.stdout) == slot.sub("<slot>", read_narrow.stdout)
    assert " store     sqlite:///./.tickwork/event… \n" in narrow.stdout, "drawn 40 wide"


@pytest.mark.parametrize(
    "answer",
    [
        {"stdout": "forged\n", "stderr": "", "code": "0"},
        {"stdout": ["forged"], "stderr": "", "code": 0},
        {"blocks": [["line", "an older service's answer"]]},
        ["not", "an", "answer"],
    ],
)
def test_an_answer_that_is_not_one_is_passed_over_and_the_store_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: Any
) -> None:
    """Whatever answers on the socket, a command prints only what it read or was told in full."""
    subprocess.run([TICKWORK, "init"], cwd=tmp_path, check=True, capture_output=True)
    monkeypatch.chdir(tmp_path)
    stopping = threading.Event()
    socket = service_socket(tmp_path / "tickwork.toml")
    questions: list[Any] = []

    def answering_so(question: Any) -> Any:
        questions.append(question)
        return answer

    serving = threading.Thread(target=serve, args=(socket, answering_so, stopping, print))
    serving.start()
    try:
        listed = forked(tmp_path, "ticks")
    finally:
        stopping.set()
        serving.join()
    assert [question["command"] for question in questions] == ["ticks"], "the socket was asked"
    assert listed.returncode == 0, listed.stderr
    assert "forged" not in listed.stdout and listed.stdout.startswith("no tick since"), listed


def printed(cwd: Path, watched: tuple[str, ...], *args: str) -> tuple[str, list[str]]:
    """What a successful `tickwork ARGS` printed, and the watched modules it loaded."""
    done, modules = reported(cwd, watched, *args)
    assert done.returncode == 0, done
    return done.stdout.removesuffix("\n"), modules


def reported(
    cwd: Path, watched: tuple[str, ...], *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """`tickwork ARGS` in a fresh interpreter as it ended, and the watched modules it loaded."""
    code = REPORT.replace("WATCHED", repr(json.dumps(watched)))
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    said, _, modules = done.stdout.removesuffix("\n").rpartition("\n")
    done.stdout = said + "\n" if said else ""
    return done, list(json.loads(modules))
