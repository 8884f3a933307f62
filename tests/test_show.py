"""`tickwork show` and `tickwork tick` tell what a tick does while it runs, and what it did."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from harness.contracts.events import BudgetSpent, TickCompleted
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.store import open_store
from tests.commands import Output, forked_cli, start, start_tick, write_config
from tests.waiting import wait_until

LEVEL = """
[levels.min]
every = "1h"
prompt = "Check the pager."
model = "fake-model"
timeout_seconds = 120
"""


def test_show_follow_prints_a_running_ticks_turns_until_it_is_cancelled(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    config = write_config(tmp_path, LEVEL)
    tick_id = "min-followed"
    first = Step(tool_calls=[ToolCallSpec(name="pager_status", arguments={"team": "db"})])
    fake.script(tick_id, [first, Step(text="never sent in time", delay=120)])
    ticking = start_tick(tick_id, config, fake, "--json")
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    wait_until(lambda: store.read_stream(f"tick-{tick_id}"), "the tick to be claimed")
    follow = Output(start(f"show {tick_id} --follow", config, fake, stdout=subprocess.PIPE))
    follow.wait_for("| Check the pager.")
    follow.wait_for("model call 1 fake-model: tool_use")
    follow.wait_for('args {"team":"db"}')
    assert follow.process.poll() is None, "the tick still runs: --follow waits for it"
    assert ticking.poll() is None
    stopped = Output(start(f"show {tick_id} --follow", config, fake, stdout=subprocess.PIPE))
    stopped.wait_for('args {"team":"db"}')
    stopped.process.send_signal(signal.SIGINT)
    assert stopped.process.wait(60) == 0, "Ctrl-C ends --follow with the story so far"
    assert "status  running" in stopped.text()

    cancelled = forked_cli(f"cancel {tick_id} --json", config, fake)
    assert cancelled.returncode == 0, cancelled.stderr
    answer = json.loads(cancelled.stdout)
    assert answer["matching"] == [tick_id] and answer["ended"] == {tick_id: "TickCancelled"}
    assert follow.process.wait(60) == 0
    printed = follow.text()
    assert "status  cancelled" in printed
    assert "cancelled by " in printed and "cancelled: cancelled" not in printed, "said once"
    ended, ticked = ticking.communicate(timeout=60)
    assert "1 model call(s)" in ticked and "so far" in ticked, "tick printed its progress"
    assert json.loads(ended)["status"] == "cancelled", "tick --json prints the story"

    shown = forked_cli(f"show {tick_id} --json", config, fake)
    assert shown.returncode == 0, shown.stderr
    story = json.loads(shown.stdout)
    assert (story["status"], story["ended_by"]) == ("cancelled", "TickCancelled")
    # The answered call, and the one in flight at the cancel if it had started (booked,
    # estimated): every booked call counts.
    assert story["model_calls"] == len(
        [e for e in store.read_stream(f"tick-{tick_id}") if e.type == BudgetSpent.type]
    )
    kinds = [step["kind"] for step in story["steps"]]
    assert kinds[:4] == ["scheduled", "started", "prompt", "model_call"] and kinds[-1] == "ended"
    assert any(s["kind"] == "tool" and s["data"]["tool"] == "pager_status" for s in story["steps"])
    assert story["result_error"] is None, "a cancelled tick's result file is not missed"
    # Booked by the worker in its grace (a model call step) or by the runner (a spend step).
    booked = [e.data for e in store.read_stream(f"tick-{tick_id}") if e.type == BudgetSpent.type]
    assert booked[-1]["estimated"], "the call cut off by the cancel, booked estimated"
    missing = forked_cli("show min-nothing", config, fake)
    assert missing.returncode == 2 and "no tick 'min-nothing'" in missing.stderr
    store.close()


def test_commands_that_print_data_print_json_and_the_version(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    config = write_config(tmp_path, LEVEL)
    status = forked_cli("status --json", config, fake)
    assert status.returncode == 0, status.stderr
    body = json.loads(status.stdout)
    assert [level["name"] for level in body["levels"]] == ["min"]
    assert body["running"] == [] and body["paused_levels"] == [] and body["spool_pending"] == 0
    assert body["processes"] == [] and body["scheduler_running"] is False, "no tickwork run"
    catalog = Path(__file__).parents[1] / "ops" / "catalog.example.toml"
    checked = forked_cli(f"catalog check {catalog} --json", config, fake)
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["valid"] is True
    cleared = forked_cli("cancel min --clear --json", config, fake)
    assert json.loads(cleared.stdout) == {"scope": "min", "cleared": False}
    version = forked_cli("--version", config, fake)
    assert version.returncode == 0 and version.stdout.startswith("tickwork 0.")


def test_show_takes_a_unique_prefix_of_a_tick_id(tmp_path: Path, fake: FakeUpstream) -> None:
    config = write_config(tmp_path, LEVEL)
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    for tick_id in ("min-a_1", "min-a_2", "min-b%9"):
        store.append(f"tick-{tick_id}", [TickCompleted(tick_id=tick_id, level="min").to_record()])
    store.close()
    shown = forked_cli("show min-b --json", config, fake)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tick_id"] == "min-b%9"
    ambiguous = forked_cli("show min-a", config, fake)
    assert ambiguous.returncode == 2, ambiguous.stderr
    assert "ambiguous: min-a_1, min-a_2" in ambiguous.stderr
    wildcard = forked_cli("show min-_", config, fake)
    assert wildcard.returncode == 2 and "no tick 'min-_'" in wildcard.stderr
