"""`tickwork show` and `tickwork tick` tell what a tick does while it runs, and what it did."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.config import load_settings
from harness.contracts import StoredEvent
from harness.contracts.events import (
    BudgetSpent,
    Event,
    ModelCalled,
    ModelCallStarted,
    TickAttemptFailed,
    TickBuffered,
    TickCancelled,
    TickCompleted,
    TickEvent,
    TickScheduled,
    TickStarted,
    TranscriptEntry,
)
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.projections import tick_now
from harness.store import open_store
from tests.api_support import serving, settings_for
from tests.commands import Output, forked_cli, start, start_tick, write_config
from tests.store_support import migrated_sqlite
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


def test_show_and_the_tick_page_say_what_a_tick_in_flight_does_now(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """A tick held in a model call and a tick backing off between attempts: both described.

    The call in flight is the SDK's retry of a throttled try, and says so.
    """
    backoff = "retry_backoff_seconds = 600\nretry_backoff_max_seconds = 600\n"
    config = write_config(tmp_path, LEVEL, runner=backoff + "infra_throttle_seconds = 0")
    held, retrying = "min-held", "min-retrying"
    fake.script(held, [Step(status=429), Step(text="never sent in time", delay=120)])
    fake.script(retrying, [Step(status=500)] * 10)
    ticks = [start_tick(tick_id, config, fake) for tick_id in (held, retrying)]
    url = f"sqlite:///{tmp_path}/events.db"
    store = open_store(url)

    def recorded(tick_id: str, kind: str) -> list[StoredEvent]:
        return [e for e in store.read_stream(f"tick-{tick_id}") if e.type == kind]

    def retried() -> list[StoredEvent] | None:
        sent = recorded(held, "ModelCallStarted")
        return sent if len(sent) == 2 else None

    _, call = wait_until(retried, "the throttled call's retry to be sent")
    (failed,) = wait_until(lambda: recorded(retrying, "TickAttemptFailed"), "attempt 1 to fail")
    (started,) = recorded(held, "TickStarted")
    deadline = started.data["occurred_at"]
    deadline = datetime.fromisoformat(deadline) + timedelta(seconds=120)
    sent = datetime.fromisoformat(call.data["occurred_at"])
    retry_at = datetime.fromisoformat(failed.data["occurred_at"]) + timedelta(seconds=600)

    shown, waiting, as_json = (
        forked_cli(command, config, fake)
        for command in (f"show {held}", f"show {retrying}", f"show {held} --json")
    )
    assert shown.returncode == 0, shown.stderr
    (now,) = [line for line in shown.stdout.splitlines() if line.startswith("now ")]
    assert now.startswith(
        f"now     attempt 1: model call 2 to fake-model, retry 1 of a refused try in flight "
        f"since {sent:%H:%M:%S} UTC ("
    ), now
    assert f"; deadline {deadline:%H:%M:%S} UTC (in " in now, now
    (next_try,) = [line for line in waiting.stdout.splitlines() if line.startswith("now ")]
    assert next_try.startswith("now     attempt 1 failed (infrastructure: "), next_try
    assert f"; attempt 2 at {retry_at:%H:%M:%S} UTC (in " in next_try, next_try
    story = json.loads(as_json.stdout)
    assert story["model_calls"] == 0 and story["now"]["doing"] == "calling"
    assert datetime.fromisoformat(story["now"]["deadline"]) == deadline

    with serving(settings_for(url, tmp_path), store) as http:
        page = http.get(f"/dashboard/ticks/{held}").text
        between = http.get(f"/dashboard/ticks/{retrying}").text
    assert (
        f'<p id="now" class="now">attempt 1: model call 2 to fake-model, retry 1 of a refused '
        f"try in flight since {sent:%H:%M:%S} UTC; deadline {deadline:%H:%M:%S} UTC</p>"
    ) in page
    assert "0 model call(s), 0 tool call(s), call 2 in flight" in page
    assert f"; attempt 2 at {retry_at:%H:%M:%S} UTC</p>" in between

    for tick_id, tick in zip((held, retrying), ticks, strict=True):
        assert forked_cli(f"cancel {tick_id}", config, fake).returncode == 0
        tick.communicate(timeout=60)
    ended = forked_cli(f"show {held}", config, fake).stdout
    assert "status  cancelled" in ended and "\nnow " not in ended, "an ended tick has no now"
    store.close()


def test_where_a_tick_stands_follows_its_stream_event_by_event(tmp_path: Path) -> None:
    """Each event moves it on: waiting, running, a call and its retry, a backoff, the end."""
    store = open_store(migrated_sqlite(tmp_path))
    t0, ids = datetime(2026, 12, 5, 12, 0, tzinfo=UTC), {"tick_id": "min-x", "level": "min"}

    def at(seconds: float) -> dict[str, Any]:
        return {**ids, "occurred_at": t0 + timedelta(seconds=seconds)}

    refused = {"error_class": "RateLimitError", "failure_class": "infrastructure"}
    events: list[Event] = [
        TickScheduled(**at(0)),
        TickBuffered(**at(0), policy="buffer_one", behind=["min-w"]),
        TickStarted(**at(10), pid=1, host="h", timeout_seconds=60),
        ModelCallStarted(**at(12), call=1, model="m", estimated_input_tokens=5),
        ModelCalled(**at(13), call=1, model="m", **refused),
        ModelCallStarted(**at(15), call=2, model="m", estimated_input_tokens=5),
        ModelCalled(**at(20), call=2, model="m", attempt=2),
        TickAttemptFailed(
            **at(21), attempt=1, failure_class="content", reason="empty", retry_in_seconds=30
        ),
        TickCancelled(**at(22), reason="cancelled by test"),
    ]
    store.append("tick-min-x", [event.to_record() for event in events])
    stored = store.read_stream("tick-min-x")
    store.close()
    now = t0 + timedelta(seconds=25)
    said = [
        standing.words(now) if (standing := tick_now(stored[:n])) else None
        for n in range(1, len(stored) + 1)
    ]
    deadline = "deadline 12:01:10 UTC (in 45.0 s)"
    assert said == [
        "attempt 1 waiting for a place since 12:00:00 UTC (25.0 s ago)",
        "attempt 1 waiting behind its level's ticks since 12:00:00 UTC (25.0 s ago)",
        f"attempt 1: running, no model call in flight since 12:00:10 UTC (15.0 s ago); {deadline}",
        f"attempt 1: model call 1 to m in flight since 12:00:12 UTC (13.0 s ago); {deadline}",
        f"attempt 1: running, no model call in flight since 12:00:13 UTC (12.0 s ago); {deadline}",
        "attempt 1: model call 2 to m, retry 1 of a refused try in flight since 12:00:15 UTC "
        f"(10.0 s ago); {deadline}",
        f"attempt 1: running, no model call in flight since 12:00:20 UTC (5.0 s ago); {deadline}",
        "attempt 1 failed (content: empty); attempt 2 at 12:00:51 UTC (in 26.0 s)",
        None,
    ]


PRICED = """
[prices."fake-model"]
input_per_mtok = 3
output_per_mtok = 15
cache_read_per_mtok = 0.3
cache_write_per_mtok = 3.75
"""


def spent(tick_id: str, prompt: int, completion: int, **parts: Any) -> TickEvent:
    return BudgetSpent(
        tick_id=tick_id,
        level="min",
        model="fake-model",
        prompt_tokens=prompt,
        completion_tokens=completion,
        **parts,
    )


def tool(tick_id: str, name: str, chars: int) -> TickEvent:
    return TranscriptEntry(tick_id=tick_id, level="min", kind="tool", tool=name, text="x" * chars)


def started(tick_id: str) -> TickEvent:
    return TickStarted(tick_id=tick_id, level="min", pid=1, host="h", attempt=1)


def test_show_spend_prints_each_calls_cost_and_the_tool_results_that_grew_the_input(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """Growth less the previous answer, shared by result size, times the calls that resent it.

    Call 2 grew 1,050 tokens over call 1, less call 1's 50 of output: 1,000, shared 3:1
    by `search_docs` and `pager_status`, each sent again by calls 2 and 3. Call 3 grew
    550 less call 2's 60: `read_file`'s 490, sent by call 3 alone. The second attempt
    starts over.
    """
    config = write_config(tmp_path, LEVEL + PRICED)
    tick_id = "min-spend"
    events = [
        started(tick_id),
        spent(tick_id, 1000, 50, cache_write_tokens=400),
        tool(tick_id, "search_docs", 3000),
        tool(tick_id, "pager_status", 1000),
        spent(tick_id, 2050, 60, cache_read_tokens=1000, reasoning_tokens=20),
        tool(tick_id, "read_file", 400),
        spent(tick_id, 2600, 80, cache_read_tokens=2000),
        started(tick_id),
        spent(tick_id, 900, 10, estimated=True),
    ]
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    store.append(f"tick-{tick_id}", [event.to_record() for event in events])
    shown = forked_cli(f"show {tick_id} --spend", config, fake)
    assert shown.returncode == 0, shown.stderr
    lines = [line.rstrip() for line in shown.stdout.splitlines()]
    # 1000x3 + 400x(3.75-3) + 50x15 = 4050; 1050x3 + 1000x0.3 + 60x15 = 4350;
    # 600x3 + 2000x0.3 + 80x15 = 3600; 900x3 + 10x15 = 2850: $0.01485 in all.
    assert lines[0] == f"tick {tick_id}: 4 model call(s), USD 0.0149 list value, USD 0.0149 billed"
    rows = [line.split() for line in lines if line[:4].strip().isdigit()]
    assert [(r[0], r[2], r[3], r[4], r[5], r[7], r[8], r[10]) for r in rows] == [
        ("1", "1,000", "-", "-", "400", "50", "-", "0.00405"),
        ("2", "2,050", "+1,050", "1,000", "-", "60", "20", "0.00435"),
        ("3", "2,600", "+550", "2,000", "-", "80", "-", "0.00360"),
        ("4", "900", "-", "-", "-", "10", "-", "0.00285"),
    ]
    assert next(line for line in lines if line.startswith("   4")).endswith(
        "fake-model (estimated: no usage reported)"
    )
    heading = "tool results by the input they added to the calls after them:"
    ranked = lines[lines.index(heading) + 1 :]
    assert ranked[:3] == [
        "      1,500 tokens  search_docs (after call 1: 750 tokens, sent again by 2 call(s))",
        "        500 tokens  pager_status (after call 1: 250 tokens, sent again by 2 call(s))",
        "        490 tokens  read_file (after call 2: 490 tokens, sent again by 1 call(s))",
    ]
    assert any(line.startswith("how: Growth is a call's input minus") for line in lines)
    as_json = json.loads(forked_cli(f"show {tick_id} --spend --json", config, fake).stdout)
    assert as_json["usd"] == pytest.approx(0.01485, abs=1e-12)
    assert [c["growth"] for c in as_json["calls"]] == [None, 1050, 550, None]

    settings = load_settings(config)
    with serving(settings, store) as http:
        page = http.get(f"/dashboard/ticks/{tick_id}").text
    store.close()
    spend = page[page.index('<section id="spend">') :]
    spend = spend[: spend.index("</section>")]
    assert "4 model call(s), USD 0.0149 list value, USD 0.0149 billed" in spend
    assert "<td>2</td><td>" in spend and "<td>+1,050</td>" in spend and "<td>0.00435</td>" in spend
    assert "<tr><td>search_docs</td><td>1</td><td>750</td><td>2</td><td>1,500</td></tr>" in spend
    assert "How: Growth is a call&#x27;s input minus" in spend
