"""A tick's life has one owner, and a decision holds at every step of it.

Real workers against the fake upstream, the real store, real `tickwork` processes and
signals: a cancel reaches a tick in its retry backoff, cancel scopes last until cleared,
a paused level starts no further attempt, and a tick started by hand runs in the manual
lane, obeys pause (unless forced), `tickwork cancel` and Ctrl-C.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from uuid import uuid4

from harness.config import PriceOverride, RunnerConfig
from harness.contracts.events import CONTROL_STREAM, TERMINAL_TYPES, LevelPaused, level_stream
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.execution.executors import LocalExecutor
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.prices import PriceBook
from harness.projections.levels import cancel_scopes
from harness.scheduling.control import ControlFollower, clear_cancel, request_cancel
from harness.scheduling.status import snapshot
from harness.scheduling.waves import Manual, SlotClaim, claim_wave
from harness.store import NewEvent, SqlEventStore, open_store
from tests.commands import ForkedCommand, forked_cli, start_tick, write_config
from tests.tick_support import Harness, calls, lifecycle, live_in_group, run_claims
from tests.waiting import wait_until


def kinds(store: SqlEventStore, tick_id: str) -> list[str]:
    return lifecycle(store.read_stream(f"tick-{tick_id}"))


def backing_off(
    tmp_path: Path, fake: FakeUpstream, backoff: float
) -> tuple[Harness, LocalExecutor]:
    """An executor whose failing ticks wait `backoff` seconds before their next attempt."""
    harness = Harness(tmp_path, fake, rag=False)
    policy = RunnerConfig(
        grace_seconds=1, infra_retries=2, retry_backoff_seconds=backoff, start_spacing_seconds=0
    )
    harness.settings = harness.settings.model_copy(update={"runner": policy})
    harness.runner.settings = harness.settings
    return harness, LocalExecutor(harness.settings, harness.preparer, harness.runner, print)


def submitted(harness: Harness, executor: LocalExecutor, claim: SlotClaim) -> SlotClaim:
    assert claim_wave(harness.store, harness.settings, [claim]) == {claim.tick_id}
    executor.submit(claim)
    return claim


def test_a_cancel_during_a_retry_backoff_ends_the_tick_without_another_attempt(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness, executor = backing_off(tmp_path, fake, backoff=60)
    follower = ControlFollower(harness.store, executor, harness.settings.levels)
    fake.script("min-backoff", [Step(status=500)] * 3)
    claim = submitted(harness, executor, SlotClaim("min-backoff", "min", None))
    wait_until(
        lambda: "TickAttemptFailed" in kinds(harness.store, claim.tick_id),
        "the first attempt never failed",
    )
    began = time.monotonic()
    request_cancel(harness.store, claim.tick_id, by="test")
    assert [r.scope for r in follower.poll()] == [claim.tick_id]
    executor.wait_idle(10)
    assert time.monotonic() - began < 10, "the backoff was waited out"
    assert kinds(harness.store, claim.tick_id) == [
        "TickScheduled",
        "TickStarted",
        "TickAttemptFailed",
        "TickCancelled",
    ]
    ended = harness.store.read_stream(f"tick-{claim.tick_id}")[-1]
    assert ended.data["reason"] == "cancelled by test (scope 'min-backoff')"
    executor.shutdown(grace=0)


def test_a_pause_recorded_during_a_backoff_starts_no_further_attempt(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness, executor = backing_off(tmp_path, fake, backoff=3)
    fake.script("min-paused", [Step(status=500)] * 3)
    claim = submitted(harness, executor, SlotClaim("min-paused", "min", None))
    wait_until(
        lambda: "TickAttemptFailed" in kinds(harness.store, claim.tick_id),
        "the first attempt never failed",
    )
    paused = LevelPaused(level="min", reason="test")
    harness.store.append(level_stream("min"), [paused.to_record()])
    executor.wait_idle(30)
    events = harness.store.read_stream(f"tick-{claim.tick_id}")
    assert [e.type for e in events].count("TickStarted") == 1, [e.type for e in events]
    assert events[-1].type == "TickCancelled" and events[-1].data["reason"] == "paused"
    executor.shutdown(grace=0)


def test_a_cancel_scope_lasts_until_cleared(tmp_path: Path, fake: FakeUpstream) -> None:
    harness, executor = backing_off(tmp_path, fake, backoff=0.05)
    request_cancel(harness.store, "min", by="test")
    prices = PriceBook(harness.settings.prices)
    assert [s.scope for s in snapshot(harness.settings, harness.store, prices).cancel_scopes] == [
        "min"
    ]
    later = submitted(harness, executor, SlotClaim("min-later", "min", None))
    executor.wait_idle(30)
    assert kinds(harness.store, later.tick_id) == ["TickScheduled", "TickCancelled"]

    assert clear_cancel(harness.store, "min", by="test")
    assert not clear_cancel(harness.store, "min", by="test")
    assert snapshot(harness.settings, harness.store, prices).cancel_scopes == []
    fake.script("min-cleared", [Step(text="done")])
    cleared = submitted(harness, executor, SlotClaim("min-cleared", "min", None))
    executor.wait_idle(60)
    assert kinds(harness.store, cleared.tick_id)[-1] == "TickCompleted"
    executor.shutdown(grace=0)


def test_manual_ticks_wait_for_a_place_in_their_own_lane(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness, executor = backing_off(tmp_path, fake, backoff=0.05)
    lane = harness.settings.runner.model_copy(update={"manual_max_concurrent": 1})
    executor = LocalExecutor(
        harness.settings.model_copy(update={"runner": lane}),
        harness.preparer,
        harness.runner,
        print,
    )
    first, second = (SlotClaim(f"min-by-hand-{n}", "min", None, manual=Manual()) for n in (1, 2))
    fake.script(first.tick_id, [Step(text="slow", delay=60)])
    fake.script(second.tick_id, [Step(text="done")])
    submitted(harness, executor, first)
    submitted(harness, executor, second)
    wait_until(lambda: [r.tick_id for r in executor.running()] == [first.tick_id], "never ran")
    assert executor.gate.queued() == [second]
    scheduled = harness.store.read_stream(f"tick-{first.tick_id}")[0]
    assert scheduled.data["manual"] is True and scheduled.data["forced"] is False
    executor.cancel(lambda level, tick_id: tick_id == first.tick_id, "test")
    executor.wait_idle(60)
    assert kinds(harness.store, second.tick_id)[-1] == "TickCompleted"
    executor.shutdown(grace=0)


LEVEL = """
[levels.min]
every = "1h"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 120
"""


def started_by_hand(
    tmp_path: Path, fake: FakeUpstream, tick_id: str
) -> tuple[ForkedCommand, SqlEventStore]:
    """`tickwork tick min` whose one answer takes a minute, once its worker runs."""
    config = write_config(tmp_path, LEVEL)
    fake.script(tick_id, [Step(text="slow", delay=60)])
    process = start_tick(tick_id, config, fake)
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    wait_until(
        lambda: tick_id in fake.state.first_request, "the tick never reached the upstream", 60
    )
    return process, store


def assert_ended_cancelled(store: SqlEventStore, tick_id: str, reason: str) -> None:
    events = store.read_stream(f"tick-{tick_id}")
    assert [e.type for e in events if e.type in TERMINAL_TYPES] == ["TickCancelled"]
    assert reason in events[-1].data["reason"]
    started = next(e for e in events if e.type == "TickStarted")
    assert live_in_group(started.data["pid"]) == []


def test_tickwork_cancel_reaches_a_tick_started_with_tickwork_tick(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    process, store = started_by_hand(tmp_path, fake, "min-by-hand-cancelled")
    cancelled = forked_cli("cancel min-by-hand --wait 30", write_config(tmp_path, LEVEL), fake)
    stdout, stderr = process.communicate(timeout=60)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert "min-by-hand-cancelled TickCancelled" in cancelled.stdout
    assert process.returncode == 1, stdout + stderr
    assert "status  cancelled" in stdout
    # The prefix stands for the tick in flight it matched: its scope is the tick's own.
    assert_ended_cancelled(store, "min-by-hand-cancelled", "scope 'min-by-hand-cancelled'")
    store.close()


def test_ctrl_c_on_tickwork_tick_ends_its_tick_cancelled(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    process, store = started_by_hand(tmp_path, fake, "min-interrupted")
    # To a thread that is not the main one, which waits for the tick's owner.
    process.send_signal_to_a_thread(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert_ended_cancelled(store, "min-interrupted", "Ctrl-C")
    store.close()


def test_the_manual_lane_cap_holds_across_tickwork_tick_processes(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    first, store = started_by_hand(tmp_path, fake, "min-by-hand-first")
    config = write_config(tmp_path, LEVEL, runner="manual_max_concurrent = 1")
    fake.script("min-by-hand-second", [Step(text="done")])
    second = start_tick("min-by-hand-second", config, fake)
    assert second.stderr is not None
    said = ""
    while "waiting:" not in said and (line := second.stderr.readline()):
        said += line
    assert "1 manual tick(s) ahead of this one hold the lane's 1" in said, said
    assert "min-by-hand-second" not in fake.state.first_request
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=60)
    stdout, stderr = second.communicate(timeout=60)
    assert second.returncode == 0, stdout + stderr
    ended = store.read_stream("tick-min-by-hand-first")[-1]
    began = next(e for e in store.read_stream("tick-min-by-hand-second") if e.type == "TickStarted")
    assert ended.type == "TickCancelled" and began.global_position > ended.global_position
    store.close()


def test_a_tick_by_hand_obeys_the_pause_unless_forced(tmp_path: Path, fake: FakeUpstream) -> None:
    config = write_config(tmp_path, LEVEL)
    assert forked_cli("pause min", config, fake).returncode == 0
    refused = forked_cli("tick min --tick-id min-refused", config, fake)
    assert refused.returncode == 1 and "status  cancelled (paused)" in refused.stdout, (
        refused.stdout + refused.stderr
    )
    fake.script("min-forced", [Step(text="done anyway")])
    forced = forked_cli("tick min --force --tick-id min-forced", config, fake)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    assert kinds(store, "min-refused") == ["TickScheduled", "TickCancelled"]
    scheduled = store.read_stream("tick-min-forced")[0]
    assert scheduled.data["forced"] is True and scheduled.data["manual"] is True
    assert kinds(store, "min-forced")[-1] == "TickCompleted"
    store.close()


def test_a_pause_withdraws_queued_ticks_at_once_and_an_automatic_one_stops_running_ticks(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness, _ = backing_off(tmp_path, fake, backoff=0.05)
    one_place = harness.settings.runner.model_copy(update={"max_concurrent": 1})
    settings = harness.settings.model_copy(update={"runner": one_place})
    executor = LocalExecutor(settings, harness.preparer, harness.runner, print)
    follower = ControlFollower(harness.store, executor, settings.levels)
    running, queued = SlotClaim("min-running", "min", None), SlotClaim("min-queued", "min", None)
    fake.script(running.tick_id, [Step(text="slow", delay=60)])
    submitted(harness, executor, running)
    submitted(harness, executor, queued)
    wait_until(lambda: running.tick_id in fake.state.first_request, "the first tick never ran")

    by_operator = LevelPaused(level="min", reason="test", by="operator")
    harness.store.append(level_stream("min"), [by_operator.to_record()])
    follower.poll()
    assert kinds(harness.store, queued.tick_id) == ["TickScheduled", "TickCancelled"]
    assert harness.store.read_stream(f"tick-{queued.tick_id}")[-1].data["reason"] == "paused"
    assert [r.tick_id for r in executor.running()] == [running.tick_id]

    automatic = LevelPaused(level="min", reason="infrastructure failures")
    harness.store.append(level_stream("min"), [automatic.to_record()])
    follower.poll()
    executor.wait_idle(30)
    assert_ended_cancelled(harness.store, running.tick_id, "paused")
    executor.shutdown(grace=0)


def test_a_whole_tick_timeout_is_retried_as_an_infrastructure_failure_then_pauses(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    policy = RunnerConfig(grace_seconds=1, infra_retries=1, retry_backoff_seconds=0.05)
    harness.settings = harness.settings.model_copy(update={"runner": policy})
    harness.runner.settings = harness.settings
    outcome = harness.tick([Step(text="too late", delay=60)] * 2, timeout=1)
    assert outcome.status == "timed_out"
    events = harness.events(outcome)
    assert lifecycle(events) == [
        "TickScheduled",
        "TickStarted",
        "TickAttemptFailed",
        "TickStarted",
        "TickTimedOut",
    ]
    begun = [e for e in events if e.type == "ModelCallStarted"]
    booked = [e.data for e in events if e.type == "BudgetSpent"]
    # Each call the deadline cut off is booked once, estimated: by its worker in the grace,
    # or by the runner for a worker that had no time to.
    assert [b["estimated"] for b in booked] == [True] * len(begun)
    assert {b["source"] for b in booked} <= {"worker", "runner"}
    (failed,) = [e.data for e in events if e.type == "TickAttemptFailed"]
    assert (failed["failure_class"], failed["reason"]) == ("infrastructure", "timed out after 1 s")
    paused = harness.store.read_stream("level-min")[-1]
    assert paused.type == "LevelPaused" and "timed out after 1 s" in paused.data["reason"]


def test_five_parallel_ticks_overshoot_the_daily_budget_by_at_most_one_call_each(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    steps = [calls("nothing"), calls("nothing"), Step(text="done")]
    probe = Harness(tmp_path / "probe", fake, rag=False).tick(list(steps))
    sizes = [
        e.data["prompt_tokens"] + e.data["completion_tokens"]
        for e in Harness(tmp_path / "probe", fake, rag=False).events(probe)
        if e.type == "BudgetSpent"
    ]
    assert len(sizes) == 3, sizes
    budget = 5 * sizes[0] + sizes[1] // 2  # the five first calls fit; any second passes it
    harness = Harness(tmp_path, fake, rag=False, daily_token_budget=budget, reserve_tokens=0)
    wide = RunnerConfig(max_concurrent=5, start_spacing_seconds=0, grace_seconds=1)
    harness.settings = harness.settings.model_copy(update={"runner": wide})
    executor = LocalExecutor(harness.settings, harness.preparer, harness.runner, print)
    claims = [SlotClaim(f"min-budget-{n}", "min", None) for n in range(5)]
    spent = run_claims(harness, fake, executor, claims, steps)
    calls_made = [e for e in spent if e.type == "BudgetSpent"]
    total = sum(e.data["prompt_tokens"] + e.data["completion_tokens"] for e in calls_made)
    assert total - budget <= 5 * max(sizes), (total, budget, sizes)
    assert len(calls_made) < 15
    ends = [e for e in spent if e.type in TERMINAL_TYPES]
    assert len(ends) == 5
    assert {e.data.get("stop_reason") for e in ends if e.type == "TickCompleted"} <= {
        "budget",
        "end_turn",
    }
    assert any(e.data.get("stop_reason") == "budget" for e in ends), [e.data for e in ends]


def test_the_in_worker_budget_counts_usd_and_what_the_levels_other_ticks_reserve(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, daily_usd_budget=100.0)
    a_dollar_a_token = PriceOverride(input_per_mtok=1_000_000, output_per_mtok=1_000_000)
    harness.settings = harness.settings.model_copy(
        update={"prices": {"fake-model": a_dollar_a_token}}
    )
    harness.preparer = Preparer(harness.settings, harness.store, env=harness.runner.env)
    harness.runner = Runner(harness.settings, harness.store, env=harness.runner.env)
    other = SlotClaim("min-reserving", "min", None, reserved_tokens=150)
    assert claim_wave(harness.store, harness.settings, [other]) == {other.tick_id}

    held_back = harness.tick([Step(text="never asked")])
    assert held_back.status == "completed" and held_back.result is not None
    assert held_back.result.stop_reason == "budget", held_back.result
    assert "billed USD 150.00 with its reservations, of its billed USD 100" in held_back.result.text
    assert held_back.tick_id not in fake.state.first_request
    assert kinds(harness.store, held_back.tick_id)[-1] == "TickCompleted"

    harness.runner.cancel_queued(other.tick_id, "min", "its reservation ends with it")
    freed = harness.tick([Step(text="done")])
    assert freed.result is not None and freed.result.stop_reason != "budget", freed.result


def test_a_cancel_recorded_before_scopes_lasted_is_not_in_force(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    legacy = NewEvent(uuid4(), "CancelRequested", 1, {"scope": "min", "by": "old"})
    store.append(CONTROL_STREAM, [legacy])
    assert cancel_scopes(store) == []
    request_cancel(store, "min", by="new")
    assert [(s.scope, s.by) for s in cancel_scopes(store)] == [("min", "new")]
    store.close()
