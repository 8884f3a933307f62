"""The overlap buffer on its own: which ticks a buffered one waits for, and what ends it.

The service's collaborator is driven here with the ticks in flight given as data and a
recording hand-off, so the order and the cancel paths are checked without a scheduler
or a worker; `tests/test_tick.py` runs the policies end to end with real ticks.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.contracts import (
    CONTROL_STREAM,
    TERMINAL_TYPES,
    Event,
    TickBuffered,
    TickCancelled,
    TickCompleted,
    TickScheduled,
    TickSkipped,
    TickStarted,
    tick_stream,
)
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.execution.executors import LocalExecutor
from harness.projections.ticks import TickInFlight
from harness.scheduling import ScopeMatch, Service, SlotClaim, claim_wave, slot_tick_id
from harness.scheduling.overlap import OverlapBuffer, ahead_of
from harness.scheduling.waves import DISPLACING
from harness.store import StoredEvent, StoreError
from tests.tick_support import Harness
from tests.waiting import wait_until

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def flying(tick_id: str, claimed_after: int) -> TickInFlight:
    return TickInFlight(tick_id, "min", "scheduled", T0 + timedelta(seconds=claimed_after), None)


def test_a_buffered_tick_waits_only_for_the_ticks_claimed_before_it() -> None:
    ticks = [flying("min-b", 1), flying("min-a", 0), flying("min-c", 1), flying("min-d", 2)]
    assert [t.tick_id for t in ahead_of("min-c", ticks)] == ["min-b", "min-a"]
    assert ahead_of("min-a", ticks) == []
    assert len(ahead_of("min-unfolded", ticks)) == 4, "a tick not folded yet waits for all"


class Recorder:
    """The hand-off as the buffer uses it: records what it submits and never starts."""

    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.never: list[tuple[str, str | None]] = []

    def submit(self, claim: SlotClaim) -> None:
        self.submitted.append(claim.tick_id)

    def never_started(self, claim: SlotClaim, reason: str | None) -> None:
        self.never.append((claim.tick_id, reason))


def test_held_ticks_start_in_claim_order_and_a_cancel_ends_one_unstarted() -> None:
    in_flight = [flying("min-0", 0), flying("min-1", 1), flying("min-2", 2), flying("min-3", 3)]
    lock = threading.Lock()
    failures: list[StoreError] = []

    def level_in_flight(level: str) -> Sequence[TickInFlight]:
        with lock:
            if not in_flight:
                raise StoreError("store out")
            return list(in_flight)

    threads: list[threading.Thread] = []
    recorder = Recorder()
    buffer = OverlapBuffer(
        None,  # type: ignore[arg-type]  # the store is asked only by displace and holder
        recorder,  # type: ignore[arg-type]
        level_in_flight,
        threading.Event(),
        lambda thread: (threads.append(thread), thread.start()),
        failures.append,
        lambda line: None,
    )
    claims = [SlotClaim(f"min-{i}", "min", T0 + timedelta(minutes=i)) for i in (1, 2, 3)]
    for claim in claims:
        buffer.reserve(claim)
        buffer.hold(claim)
    assert buffer.holding("min") and not buffer.holding("hour")
    buffer.cancel(lambda level, tick_id: tick_id == "min-2", "cancelled by test")
    wait_until(lambda: recorder.never, "the cancelled tick to end")
    assert recorder.never == [("min-2", "cancelled by test")] and recorder.submitted == []
    with lock:
        del in_flight[0]  # the running tick ends: min-1 is next
        del in_flight[1]  # min-2 ended cancelled
    wait_until(lambda: recorder.submitted == ["min-1"], "the first buffered tick to start")
    with lock:
        del in_flight[0]
    wait_until(lambda: recorder.submitted == ["min-1", "min-3"], "the second to start")
    for thread in threads:
        thread.join()
    assert not buffer.holding("min") and not failures


def local_service(harness: Harness) -> Service:
    executor = LocalExecutor(harness.settings, harness.preparer, harness.runner, lambda line: None)
    return Service(harness.settings, harness.store, executor, lambda line: None)


def _stream(harness: Harness, slot: datetime) -> list[StoredEvent]:
    return harness.store.read_stream(tick_stream(slot_tick_id("min", slot)))


def _at(stream: list[StoredEvent], kind: type[Event]) -> datetime:
    return next(e for e in stream if e.type == kind.type).recorded_at


def test_buffer_all_runs_every_slot_one_after_another_in_slot_order(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, overlap="buffer_all")
    service = local_service(harness)
    slots = [T0 + timedelta(minutes=i) for i in range(3)]
    for slot in slots[:2]:
        fake.script(slot_tick_id("min", slot), [Step(text="slow", delay=0.5)])
    service.fire([(slot, "min") for slot in slots])  # one wave: the first runs, two wait
    service.wait_idle(120)
    streams = [_stream(harness, slot) for slot in slots]
    assert [s[-1].type for s in streams] == [TickCompleted.type] * 3
    buffered = [[e.data for e in s if e.type == TickBuffered.type] for s in streams]
    assert buffered[0] == []
    assert buffered[1][0]["policy"] == "buffer_all"
    assert buffered[2][0]["behind"] == [slot_tick_id("min", s) for s in slots[:2]]
    for before, after in itertools.pairwise(streams):
        assert _at(after, TickStarted) >= before[-1].recorded_at


POLICIES = sorted(DISPLACING)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_displacing_policy_cancels_the_tick_in_flight_for_the_new_slot(
    tmp_path: Path, fake: FakeUpstream, policy: str
) -> None:
    harness = Harness(tmp_path, fake, rag=False, overlap=policy)
    service = local_service(harness)
    # Slots of each policy's own: the module's fake remembers the ticks that asked it, and
    # the second case found the first's old tick there and displaced its own before it ran.
    old = T0 + timedelta(days=1 + POLICIES.index(policy), hours=1)
    new = old + timedelta(minutes=1)
    old_id, new_id = slot_tick_id("min", old), slot_tick_id("min", new)
    fake.script(old_id, [Step(text="never sent", delay=60)])
    service.fire([(old, "min")])
    wait_until(lambda: old_id in fake.state.first_request, "the first tick to ask the model")
    service.fire([(new, "min")])
    service.wait_idle(120)
    first, second = _stream(harness, old), _stream(harness, new)
    assert first[-1].type == TickCancelled.type
    assert first[-1].data["reason"] == f"overlap: {policy} by {new_id}"
    assert second[-1].type == TickCompleted.type
    held = [e.data for e in second if e.type == TickBuffered.type]
    if policy == "cancel_other":
        assert held and held[0]["behind"] == [old_id]
        assert _at(second, TickStarted) >= first[-1].recorded_at
    else:
        assert held == [], "terminate_other starts the new tick at once"
    requests = harness.store.read_stream(CONTROL_STREAM)
    assert [e.data["scope"] for e in requests] == [old_id], "one cancel, scoped to the old tick"


class HoldsOneTick(LocalExecutor):
    """Holds one tick between its queue and its runner until the service stops its ticks.

    Then it lets the tick go on, and the service goes on only once that tick asked the
    model or ended: whatever the service does after its local cancel comes after the
    tick's first step.
    """

    def __init__(self, harness: Harness, tick_id: str, settled: Callable[[], bool]) -> None:
        super().__init__(harness.settings, harness.preparer, harness.runner, lambda line: None)
        self.tick_id, self.settled = tick_id, settled
        self.holding, self.go = threading.Event(), threading.Event()

    def _execute(self, claim: SlotClaim) -> None:
        if claim.tick_id == self.tick_id:
            self.holding.set()
            self.go.wait(60)
        super()._execute(claim)

    def cancel(self, matches: ScopeMatch, reason: str, running: bool = True) -> None:
        super().cancel(matches, reason, running)
        self.go.set()
        wait_until(self.settled, "the displaced tick to ask the model or end", 60)


def test_a_tick_displaced_between_queue_and_runner_never_asks_the_model(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """A tick displaced between the service's queue and its runner ends before its model call.

    It is in neither when the local cancel looks; the recorded request, appended before that
    cancel, stops it at its first step.
    """
    harness = Harness(tmp_path, fake, rag=False, overlap="terminate_other")
    old = T0 + timedelta(days=len(POLICIES) + 1, hours=1)
    old_id, new_id = slot_tick_id("min", old), slot_tick_id("min", old + timedelta(minutes=1))

    def settled() -> bool:
        stream = _stream(harness, old)
        return old_id in fake.state.first_request or stream[-1].type in TERMINAL_TYPES

    executor = HoldsOneTick(harness, old_id, settled)
    service = Service(harness.settings, harness.store, executor, lambda line: None)
    fake.script(old_id, [Step(text="never sent", delay=60)])
    service.fire([(old, "min")])
    assert executor.holding.wait(60), "the first tick never left the queue"
    service.fire([(old + timedelta(minutes=1), "min")])
    service.wait_idle(120)
    first = _stream(harness, old)
    assert first[-1].type == TickCancelled.type
    assert first[-1].data["reason"] == f"overlap: terminate_other by {new_id}"
    assert old_id not in fake.state.first_request, "the displaced tick asked the model"
    assert TickStarted.type not in [e.type for e in first]


def test_buffer_one_holds_across_replicas_through_the_store(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """A slot buffered by one replica makes the other skip the next: TickBuffered is the key."""
    harness = Harness(tmp_path, fake, rag=False, overlap="buffer_one")
    first, second = local_service(harness), local_service(harness)
    slots = [T0 + timedelta(hours=2, minutes=i) for i in range(3)]
    ids = [slot_tick_id("min", slot) for slot in slots]
    assert claim_wave(harness.store, harness.settings, [SlotClaim(ids[0], "min", slots[0])])
    first.fire([(slots[1], "min")])
    second.fire([(slots[2], "min")])
    assert [e.type for e in _stream(harness, slots[1])] == [TickScheduled.type, TickBuffered.type]
    skipped = _stream(harness, slots[2])[-1]
    assert skipped.type == TickSkipped.type and skipped.data["reason"] == "overlap"
    first.stopping.set()  # the held tick ends without starting
    first.wait_idle(60)
    assert _stream(harness, slots[1])[-1].type == TickCancelled.type
