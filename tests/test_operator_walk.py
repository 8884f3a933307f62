"""A new operator's walk, as the README's quickstart leads it, asserted at each step.

`tickwork init` in an empty folder, `tickwork run` on a level that fires every second
with the service's own fake upstream, scripted over HTTP as the README shows; a failure
run that tickwork pauses the level for, `tickwork resume`, a tick retried once, a key
misspelt in the file while the service runs, and `tickwork doctor`. What is asserted is
what the operator reads: the service's log lines and the commands' output, as printed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harness.scheduling.control import operator
from harness.store import HEAD_REVISION
from tests import web
from tests.commands import ForkedCommand, Output, environment, forked, free_port, write_config

LEVEL = """
[levels.min]
every = "1s"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 60
"""
RUNNER = """
infra_retries = 1
retry_backoff_seconds = 0
infra_throttle_seconds = 0
"""
"""One retry, at once: two 500s are a failure run, a 500 then an answer a retried tick."""
FIVE_HUNDRED = "the upstream answered 500: scripted status 500"
UNKNOWN_KEY = "unknown key 'timeout_secods' in [levels.min]; did you mean 'timeout_seconds'?"


def tickwork(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A command in the operator's second shell: in the folder, no upstream of their own."""
    return forked(home, *args, unset=("OPENAI_BASE_URL",))


def said(service: Output, text: str) -> str:
    """The service's first line holding `text`, without its time."""
    return service.wait_for(text).split(" ", 1)[1]


def rows(output: str) -> list[str]:
    """A table's rows as `cell | cell | …`, its padding gone."""
    return [
        " | ".join(cell.strip() for cell in line.split("│")[1:-1])
        for line in output.splitlines()
        if line.startswith("│")
    ]


@pytest.mark.long
def test_a_new_operator_walks_from_init_to_doctor(tmp_path: Path) -> None:
    init = tickwork(tmp_path, "init")
    assert init.returncode == 0, init.stderr
    assert init.stdout == (
        "wrote tickwork.toml\n"
        f"store ready: sqlite:///./.tickwork/events.db (schema {HEAD_REVISION})\n"
    )
    assert (tmp_path / "tickwork.toml").exists()
    config = write_config(  # the operator's edit: a level every second, retried once
        tmp_path,
        f"[api]\nport = {free_port()}\n{LEVEL}",
        runner=RUNNER,
        store_url="sqlite:///./.tickwork/events.db",
    )
    own = {k: v for k, v in environment().items() if k != "OPENAI_BASE_URL"}
    piped = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    service = Output(ForkedCommand(tmp_path, ["run"], own, **piped))
    try:
        banner = service.wait_for("  upstream  openai-chat: tickwork's fake at ")
        fake, script = re.findall(r"(http://\S+?)\)?(?:\s|$)", banner)
        assert banner.endswith(f"fake at {fake} (script its answers: POST {script})\n"), banner
        assert service.wait_for("no OPENAI_BASE_URL set: ") == (
            f"no OPENAI_BASE_URL set: ticks talk to tickwork's fake upstream at {fake}\n"
        )
        first = service.wait_for(" completed: ")
        assert first.endswith(' — "All done: nothing needed attention."\n'), first

        queued = web.post(script, json={"key": "default", "steps": [{"status": 500}] * 2})
        assert queued.json() == {"queued": 2, "waiting": 2}
        paused = said(service, "min paused (")
        failed = re.search(r"\((min-\S+) failed on infrastructure after retries: ", paused)
        assert failed, paused
        tick = failed[1]
        assert paused == (
            f"min paused ({tick} failed on infrastructure after retries: InternalServerError: "
            f"{FIVE_HUNDRED}): by tickwork; no tick starts until `tickwork resume min`\n"
        )
        assert said(service, f"{tick} failed (").startswith(
            f"{tick} failed (InternalServerError: {FIVE_HUNDRED}) after 2 attempts "
            f"({FIVE_HUNDRED}): "
        )
        service.wait_for(" skipped: min is paused (tickwork resume min)")
        assert web.get(script).json() == {}, "the failure run took both steps"
        levels = tickwork(tmp_path, "levels")
        assert (
            f" by tickwork: {tick} failed on infrastructure after retries: "
            f"InternalServerError: {FIVE_HUNDRED}\n"
        ) in levels.stdout, levels.stdout

        retry = [{"status": 500}, {"text": "Fine."}]
        assert web.post(script, json={"key": "default", "steps": retry}).json()["queued"] == 2
        resume = tickwork(tmp_path, "resume", "min")
        assert (resume.returncode, resume.stdout) == (0, "min: paused -> running\n")
        assert said(service, " min resumed") == f"min resumed: by {operator()}\n"
        retried = said(service, " completed after 2 attempts (")
        assert re.fullmatch(
            rf"(min-\S+) completed after 2 attempts \({FIVE_HUNDRED}\): "
            r'[\d.]+ s, \d+ tokens, unpriced — "Fine\."\n',
            retried,
        ), retried
        levels, status, ticks = (tickwork(tmp_path, c) for c in ("levels", "status", "ticks"))
        assert "paused since" not in levels.stdout, levels.stdout
        [level] = [row for row in rows(status.stdout) if row.startswith("min |")]
        assert level.split(" | ")[3] == "", f"not paused: {level}"
        revision = re.search(r"levels +revision (\w+) \(this file\)", status.stdout)
        assert revision, status.stdout
        attempts = {
            cells[0]: cells[1:7] for cells in map(str.split, ticks.stdout.splitlines()) if cells
        }
        assert attempts[tick][0] == "failed" and attempts[tick][-1] == "2", ticks.stdout
        assert attempts[retried.split()[0]][0] == "completed", ticks.stdout
        assert attempts[retried.split()[0]][-1] == "2", ticks.stdout

        config.write_text(config.read_text().replace("timeout_seconds", "timeout_secods"))
        assert said(service, " rejected (") == (
            f"tickwork.toml rejected (invalid configuration; {UNKNOWN_KEY}): levels revision "
            f"{revision[1]} stays in force (an edit or SIGHUP reads the file again)\n"
        )
        status = tickwork(tmp_path, "status")
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith(
            f"tickwork.toml: invalid configuration\n  {UNKNOWN_KEY}\nthe file is not in force: "
            "this is the running service's status, on the configuration it loaded "
            "(fix the file and it reloads)\n"
        ), status.stdout
        assert f"revision {revision[1]} (in force; the file on disk is not)" in status.stdout
        assert "scheduler pid " in status.stdout and "min | every 1s" in rows(status.stdout)[0]
        doctor = tickwork(tmp_path, "doctor")
        assert (doctor.returncode, doctor.stdout) == (2, "")
        assert doctor.stderr == f"error: tickwork.toml: invalid configuration\n  {UNKNOWN_KEY}\n"

        config.write_text(config.read_text().replace("timeout_secods", "timeout_seconds"))
        service.wait_for(f"tickwork.toml reloaded: no level changed (revision {revision[1]})")
        doctor = tickwork(tmp_path, "doctor")
    finally:
        output = service.stop()
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    checks = rows(doctor.stdout)
    store = f"sqlite:///./.tickwork/events.db at schema {HEAD_REVISION} (current)"
    assert checks[0] == f"store | ok | {store}", checks
    alive = r"scheduler \| ok \| alive: pid \d+ on \S+, last heartbeat \d+ s ago"
    assert re.fullmatch(alive, checks[1]), checks
    shared = f"tickwork's fake at {fake} (the running scheduler's)"
    assert f"upstream openai-chat of min | ok | {shared}" in checks, checks
    assert doctor.stdout.endswith("all checks passed\n"), doctor.stdout
    assert service.process.returncode == 0 and output.endswith(" tickwork stopped\n"), output
