"""The `tickwork` command, run as an operator runs it: a real process in a real directory."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from uuid import uuid4

import pytest

from harness.contracts.events import BudgetSpent, TickStarted
from harness.execution.prepare import template_hash
from harness.store import HEAD_REVISION, NewEvent, Spool, beats, open_store
from tests.commands import TICKWORK, Output, environment, forked, forked_each, run
from tests.waiting import wait_until


def seed(cwd: Path) -> None:
    store = open_store(f"sqlite:///{cwd}/.tickwork/events.db")
    spends = [("min", "gpt-4o-mini", 2000), ("min", "gpt-4o-mini", 3000), ("hour", "home-model", 1)]
    for i, (level, model, prompt) in enumerate(spends):
        started = TickStarted(tick_id=f"t{i}", level=level, pid=1, host="h")
        spent = BudgetSpent(
            tick_id=f"t{i}", level=level, model=model, prompt_tokens=prompt, completion_tokens=10
        )
        store.append(f"tick-t{i}", [started.to_record(), spent.to_record()])
    store.close()


def test_init_then_spend_in_an_empty_directory(tmp_path: Path) -> None:
    init = run(tmp_path, "init")
    assert init.returncode == 0, init.stderr
    assert (tmp_path / "tickwork.toml").exists()
    assert (tmp_path / ".tickwork" / "events.db").exists()
    # `init` is the fresh `tickwork` an operator starts first; the two reads after it fork.
    spend, status = forked_each(tmp_path, [["spend"], ["status"]])
    assert spend.returncode == 0, spend.stderr
    assert "no spend recorded since" in spend.stdout
    assert status.returncode == 0, status.stderr
    rows = [line.split()[1] for line in status.stdout.splitlines() if line.startswith("│")]
    assert {"min", "hour"} <= set(rows) and "no tick in flight" in status.stdout
    assert "no scheduler running: no slot fires until `tickwork run`" in status.stdout
    assert "0 / 2,000,000" in status.stdout, "the min level's spend against its budget"


def test_a_bad_config_exits_2_naming_the_key_and_touches_no_store(tmp_path: Path) -> None:
    (tmp_path / "tickwork.toml").write_text('[levels.min]\nschedule = "* * * * *"\ntimout = 3\n')
    result = run(tmp_path, "status")
    assert result.returncode == 2
    assert "unknown key 'timout' in [levels.min]" in result.stderr, result.stderr
    assert "tickwork.toml" in result.stderr
    assert not (tmp_path / ".tickwork").exists()


def test_spend_reports_tokens_and_cost_as_json_and_table(tmp_path: Path) -> None:
    seed(tmp_path)
    result, table, bad = forked_each(
        tmp_path,
        [
            ["spend", "--by", "level", "--by", "model", "--json"],
            ["spend", "--by", "model"],
            ["spend", "--by", "colour"],
        ],
    )
    assert result.returncode == 0, result.stderr
    rows = {(r["group"]["level"], r["group"]["model"]): r for r in json.loads(result.stdout)}
    assert rows[("min", "gpt-4o-mini")]["prompt_tokens"] == 5000
    assert rows[("min", "gpt-4o-mini")]["cost_usd"] == pytest.approx((5000 * 0.15 + 20 * 0.6) / 1e6)
    assert rows[("hour", "home-model")]["cost_usd"] is None
    assert "unpriced" in table.stdout and "gpt-4o-mini" in table.stdout
    assert " 0.000762" in table.stdout, "a sub-cent cost keeps its significant digits"
    assert bad.returncode == 2 and "colour" in bad.stderr and "template" in bad.stderr


def test_events_filters_by_stream_and_type(tmp_path: Path) -> None:
    seed(tmp_path)
    everything, spent, one, recent, bad = forked_each(
        tmp_path,
        [
            ["events", "--json"],
            ["events", "--json", "--type", "BudgetSpent"],
            ["events", "--json", "--stream", "tick-t1"],
            ["events", "--since", "1h", "--limit", "2"],
            ["events", "--since", "yesterday-ish"],
        ],
    )
    assert len(everything.stdout.splitlines()) == 6
    assert {json.loads(line)["type"] for line in spent.stdout.splitlines()} == {"BudgetSpent"}
    assert [json.loads(line)["stream_position"] for line in one.stdout.splitlines()] == [1, 2]
    assert recent.returncode == 0 and "TickStarted" in recent.stdout
    assert "tick-t0  TickStarted: attempt 1 started: pid 1 on h" in recent.stdout, recent.stdout
    assert "BudgetSpent: model gpt-4o-mini: 2,000 prompt + 10 completion" in recent.stdout
    assert bad.returncode == 2 and "yesterday-ish" in bad.stderr


def test_events_follow_prints_new_events_until_interrupted(tmp_path: Path) -> None:
    seed(tmp_path)
    follower = subprocess.Popen(
        [TICKWORK, "events", "--json", "--follow", "--type", "Marker"],
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        text=True,
        # As a shell's background job starts it: Python then raises no KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert follower.stdout is not None
        store = open_store(f"sqlite:///{tmp_path}/.tickwork/events.db")
        for n in (1, 7):  # the follower printing 1 shows it runs: 7 comes after it started
            store.append("marker", [NewEvent(uuid4(), "Marker", 1, {"n": n})])
            line = follower.stdout.readline()
            assert json.loads(line)["data"] == {"n": n}
        store.close()
    finally:
        follower.send_signal(signal.SIGINT)
        assert follower.wait(60) == 0


def test_projections_rebuild_and_spool_ingest(tmp_path: Path) -> None:
    seed(tmp_path)
    rebuilt, unknown = forked_each(
        tmp_path, [["projections", "rebuild"], ["projections", "rebuild", "nope"]]
    )
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "spend: 3 events folded" in rebuilt.stdout and "ticks: 6 events folded" in rebuilt.stdout
    assert unknown.returncode == 2 and "no projection named 'nope'" in unknown.stderr

    spool = Spool(tmp_path / ".tickwork" / "spool")
    late = BudgetSpent(tick_id="t9", level="min", model="m", prompt_tokens=1, completion_tokens=1)
    spool.write("tick-t9", [late.to_record()])
    ingested = forked(tmp_path, "spool", "ingest")
    assert ingested.returncode == 0 and "1 appended" in ingested.stdout
    again = forked(tmp_path, "spool", "ingest")
    assert "0 file(s)" in again.stdout


def test_migrate_reports_the_schema(tmp_path: Path) -> None:
    first = forked(tmp_path, "migrate")
    assert first.returncode == 0 and f"none -> {HEAD_REVISION}" in first.stdout
    second = forked(tmp_path, "migrate")
    assert f"already at {HEAD_REVISION}" in second.stdout


def test_tick_runs_one_tick_on_the_fake_upstream(tmp_path: Path) -> None:
    assert forked(tmp_path, "init").returncode == 0
    result, unknown = forked_each(
        tmp_path, [["tick", "min", "--prompt", "Say hello."], ["tick", "weekly"]]
    )
    assert result.returncode == 0, result.stderr
    assert "fake upstream" in result.stderr
    assert "status  completed" in result.stdout and "1 model call(s)" in result.stdout
    tick_id = result.stdout.split()[1]
    shown, listed, page, by_template = forked_each(
        tmp_path,
        [
            ["show", tick_id],
            ["ticks", "--json"],
            ["ticks", "--level", "min", "--limit", "1"],
            ["spend", "--by", "template", "--json"],
        ],
    )
    assert "model   gpt-4o-mini" in shown.stdout and " s from claim to start" in shown.stdout
    assert f"by genai-prices@{version('genai-prices')}" in shown.stdout, "each call's USD, source"
    [row] = json.loads(listed.stdout)["ticks"]
    assert (row["tick_id"], row["status"], row["model"]) == (tick_id, "completed", "gpt-4o-mini")
    assert row["duration_seconds"] > 0 and 0 < row["cost_usd"] < 0.01
    assert tick_id in page.stdout and "completed" in page.stdout, page.stdout
    following = page.stdout.split("next page: tickwork ")[1].strip()
    rest = forked(tmp_path, *following.replace("'", "").split())
    assert rest.returncode == 0 and "no tick since" in rest.stdout, rest.stdout + rest.stderr
    assert [row["group"] for row in json.loads(by_template.stdout)] == [
        {"template": template_hash("Say hello.")}
    ], "a prompt given by hand is its own template"
    assert unknown.returncode == 2 and "no level named 'weekly'" in unknown.stderr


def test_a_paused_tick_and_a_cancel_of_nothing_say_what_to_do(tmp_path: Path) -> None:
    assert forked(tmp_path, "init").returncode == 0
    paused, nothing, short = forked_each(
        tmp_path, [["pause", "min"], ["cancel", "nosuch"], ["cancel", "m"]]
    )
    assert paused.returncode == 0, paused.stderr
    assert nothing.returncode == 2 and "'nosuch' is no level" in nothing.stderr
    assert short.returncode == 2 and "--force" in short.stderr, "a prefix of no tick is refused"
    refused, forced = forked_each(tmp_path, [["tick", "min"], ["cancel", "nosuch", "--force"]])
    assert refused.returncode == 1 and "status  cancelled (paused)" in refused.stdout
    assert "level 'min' is paused" in refused.stderr
    assert "tickwork resume min" in refused.stderr and "--force" in refused.stderr
    assert "result" not in refused.stdout, "no path to a result that was never written"
    assert forced.returncode == 0 and "in force until" in forced.stdout, forced.stderr


def test_run_says_what_runs_where_and_shares_its_fake_with_a_tick_by_hand(tmp_path: Path) -> None:
    """Its banner and a tick by hand's line read as the README's quickstart shows them."""
    assert forked(tmp_path, "init").returncode == 0
    own = {k: v for k, v in environment().items() if k != "OPENAI_BASE_URL"}
    service = Output(
        subprocess.Popen(
            [TICKWORK, "run"],
            cwd=tmp_path,
            env=own,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    )
    try:
        fake = (
            service.wait_for("  upstream  openai-chat: tickwork's fake at ")
            .split(" at ")[1]
            .split()[0]
        )
        assert "POST " in service.wait_for("  upstream") and service.wait_for("  store     sqlite")
        told = service.wait_for("  upstream  openai-chat: ").split("openai-chat: ", 1)[1].strip()
        store = open_store(f"sqlite:///{tmp_path}/.tickwork/events.db")
        try:
            (beat,) = [b for b in beats(store) if b.role == "scheduler"]
        finally:
            store.close()
        assert beat.wires["openai-chat"] == told, "the dashboard's word is the banner's"
        by_hand = forked(tmp_path, "tick", "hour", unset=("OPENAI_BASE_URL",))
        assert by_hand.returncode == 0, by_hand.stderr
        assert f"the running service's fake at {fake}" in by_hand.stderr, "one fake for both"
        tick_id = by_hand.stdout.split()[1]
        told = service.wait_for(f"{tick_id} completed: ")
        assert " tokens, $" in told and "by hand" in told and '"All done' in told, told
    finally:
        output = service.stop()
    assert "tickwork stopped" in output
    shapes = {_shape(line, tmp_path) for line in output.splitlines()}
    sample = [line for line in _readme_log_sample() if not re.match(r"[\d:]+ min-", line)]
    assert len(sample) >= 10, "the README's quickstart shows the service's log"
    for line in sample:
        assert _shape(line, tmp_path) in shapes, (
            f"the README shows a line it does not print: {line}"
        )


def _readme_log_sample() -> list[str]:
    """The service's log as the README's quickstart shows it."""
    text = (Path(__file__).parents[1] / "README.md").read_text()
    after = text.split("then a line\nper tick (times UTC):\n\n```\n", 1)[1]
    return after.split("```", 1)[0].splitlines()


def _shape(line: str, home: Path) -> str:
    """A log line with what differs from run to run made alike: numbers, host, home, ids."""
    line = line.replace("/home/you/tickwork", str(home))
    line = re.sub(r"-[0-9a-f]{8}\b", "-HEX", line)
    line = re.sub(r"pid \d+ on \S+", "pid N on HOST", line)
    return re.sub(r"\d+", "N", line)


def test_tick_no_wait_returns_at_once_and_the_tick_completes(tmp_path: Path) -> None:
    assert forked(tmp_path, "init").returncode == 0
    started = forked(tmp_path, "tick", "min", "--no-wait")
    assert started.returncode == 0, started.stderr
    tick_id = started.stdout.split()[2]

    store = open_store(f"sqlite:///{tmp_path}/.tickwork/events.db")

    def completed() -> list[str]:
        types = [event.type for event in store.read_stream(f"tick-{tick_id}")]
        return types if "TickCompleted" in types else []

    types = wait_until(completed, "the tick to complete", interval=0.5)
    store.close()
    assert types[0] == "TickScheduled" and types[-1] == "TickCompleted"


def test_rag_index_builds_an_index_and_names_a_missing_folder(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("Backups run at 02:00.\n\nRestores need two people.")
    indexed = forked(tmp_path, "rag", "index", str(notes))
    assert indexed.returncode == 0 and "1 file(s), 1 passage(s)" in indexed.stdout
    missing = forked(tmp_path, "rag", "index", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


FORKED_WIDTH = """
import importlib, os
cli = importlib.import_module("harness.cli.app")  # `harness.cli.app` is also the Typer app
os.environ["COLUMNS"] = "91"
print(cli.out.width, flush=True)
if os.fork() == 0:
    os.environ["COLUMNS"] = "37"
    print(cli.out.width, flush=True)
    os._exit(0)
os.wait()
"""


def test_a_forked_child_draws_its_own_consoles() -> None:
    """A console was drawn for the process that made it (its width, its colours).

    A forked child, such as a detached tick's owner, makes its own for where it runs.
    """
    done = subprocess.run(
        [sys.executable, "-c", FORKED_WIDTH], capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == ["91", "37"], done.stderr
