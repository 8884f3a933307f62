"""The overlap buffer on its own: which ticks a buffered one waits for, and what ends it.

The service's collaborator is driven here with the ticks in flight given as data and a
recording hand-off, so the order and the cancel paths are checked without a scheduler
or a worker; `tests/test_tick.py` runs the policies end to end with real ticks.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from harness.projections.ticks import TickInFlight
from harness.scheduling.overlap import OverlapBuffer, ahead_of
from harness.scheduling.waves import SlotClaim
from harness.store import StoreError
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
