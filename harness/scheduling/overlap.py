"""Ticks held back by their level's overlap policy until the ticks ahead of them end.

A slot that fires while a tick of its level is in flight may be buffered (`buffer_one`,
`buffer_all`, `cancel_other`): claimed now, started once the level is free. This holds
such ticks, one thread each, so the service only decides and claims. The tick waits for
the ticks of its level claimed before it (any replica's, read from the store), so buffered
slots start one after another in claim order, which is slot order; a cancel request that
covers it, or the service stopping, ends it without starting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime

from harness.contracts import CONTROL_STREAM, CancelRequested, TickBuffered, tick_stream
from harness.projections import TickInFlight
from harness.scheduling.handoff import Handoff, ScopeMatch
from harness.scheduling.timetable import POLL_SECONDS
from harness.scheduling.waves import SlotClaim
from harness.store import EventStore, StoreError

InFlight = Callable[[str], Sequence[TickInFlight]]
"""Level -> its ticks in flight in any replica (raises StoreError while the store is out)."""


def ahead_of(tick_id: str, flying: Sequence[TickInFlight]) -> list[TickInFlight]:
    """The ticks of `flying` claimed before `tick_id`: those a buffered tick waits for.

    Claim order is (scheduled_at, tick id): slots claimed in one wave share a time and
    their ids sort by slot. A tick missing from `flying` (not folded yet) waits for all.
    """
    mine = next((t for t in flying if t.tick_id == tick_id), None)
    if mine is None:
        return [t for t in flying if t.tick_id != tick_id]
    key = _order(mine)
    return [t for t in flying if t.tick_id != tick_id and _order(t) < key]


def _order(tick: TickInFlight) -> tuple[datetime, str]:
    assert tick.scheduled_at is not None  # the in-flight reader keeps only scheduled ticks
    return tick.scheduled_at, tick.tick_id


class OverlapBuffer:
    """The buffered ticks of one service: held in threads, submitted when their turn comes.

    It also carries out what `cancel_other` and `terminate_other` decide of the ticks a
    new one displaces, and tells whether a level holds a buffered tick in any replica.
    """

    def __init__(
        self,
        store: EventStore,
        executor: Handoff,
        in_flight: InFlight,
        stopping: threading.Event,
        track: Callable[[threading.Thread], None],
        store_failed: Callable[[StoreError], None],
        report: Callable[[str], None],
    ) -> None:
        self.store = store
        self.executor = executor
        self.in_flight = in_flight
        self.stopping = stopping
        self.track = track
        self.store_failed = store_failed
        self.report = report
        self._lock = threading.Lock()
        self.buffered: dict[str, list[SlotClaim]] = {}
        """Level -> its ticks held here, in the order they were buffered."""
        self.cancelled: dict[str, str] = {}
        """Tick id -> why a held tick must end without starting."""
        self.wake = threading.Condition(self._lock)

    def reserve(self, claim: SlotClaim) -> None:
        """Count a tick as buffered from its decision on, before its claim commits.

        Later slots of the same wave see it (`holding`); `release` undoes it when the
        claim does not go through.
        """
        with self._lock:
            self.buffered.setdefault(claim.level, []).append(claim)

    def release(self, claim: SlotClaim) -> None:
        """Forget a reserved tick that will not be held (claimed elsewhere, out of budget)."""
        with self._lock:
            held = self.buffered.get(claim.level, [])
            if claim in held:
                held.remove(claim)
            if not held:
                self.buffered.pop(claim.level, None)

    def holding(self, level: str) -> bool:
        """Whether this service holds a tick of the level already."""
        with self._lock:
            return bool(self.buffered.get(level))

    def holder(self, flying: Sequence[TickInFlight]) -> Callable[[str], bool]:
        """`holding` for one wave: held here, or a tick of the level waits buffered.

        A tick buffered once but started since holds nothing: only ticks not started yet
        are looked at. The store is asked once per level, only for a level the wave asks about (a
        `buffer_one` level that is busy): a tick another replica buffered holds the level
        as one of ours does.
        """
        asked: dict[str, bool] = {}

        def holding(level: str) -> bool:
            if self.holding(level):
                return True
            if level not in asked:
                streams = [
                    tick_stream(t.tick_id)
                    for t in flying
                    if t.level == level and t.status == "scheduled"
                ]
                found = self.store.read_streams(streams, types=[TickBuffered.type])
                asked[level] = any(found.values())
            return asked[level]

        return holding

    def displace(self, claim: SlotClaim, targets: Sequence[str]) -> None:
        """Cancel the ticks a new one displaces (`cancel_other`, `terminate_other`).

        One cancel request per tick, scoped to its id (it ends with the tick) and
        recorded in the control stream, so whichever replica or worker holds the tick
        ends it, with the reason naming the policy and the tick that displaced it. Ticks
        this service runs or holds are stopped at once, once the request is recorded: a
        tick between this service's queue and its runner (its payload being prepared) is
        in neither when the local cancel looks, and meets the request at its first step.
        Stopped first, such a tick could ask the store before the request was there and
        run on: held 60 s in a model call, it ended cancelled after the call, or completed.

        Raises:
            StoreError: the request could not be recorded (this service's are stopped).
        """
        why = f"overlap: {claim.policy} by {claim.tick_id}"
        chosen = set(targets)
        self.report(f"{claim.tick_id} displaces {', '.join(targets)} ({claim.policy})")
        requests = [CancelRequested(scope=target, by="tickwork", why=why) for target in targets]
        try:
            self.store.append(CONTROL_STREAM, [request.to_record() for request in requests])
        finally:
            self.executor.cancel(lambda _, tick_id: tick_id in chosen, why)
            self.cancel(lambda _, tick_id: tick_id in chosen, why)

    def hold(self, claim: SlotClaim) -> None:
        """Hold a claimed (reserved) tick in a thread of its own until its turn comes."""
        self.report(f"{claim.tick_id} buffered until the tick(s) of {claim.level} ahead end")
        self.track(threading.Thread(target=self._hold, args=(claim,), daemon=True))

    def cancel(self, matches: ScopeMatch, reason: str) -> None:
        """Held ticks a cancel request covers end cancelled instead of starting."""
        with self._lock:
            for claims in self.buffered.values():
                for claim in claims:
                    if matches(claim.level, claim.tick_id):
                        self.cancelled[claim.tick_id] = reason
            self.wake.notify_all()

    def _hold(self, claim: SlotClaim) -> None:
        """Wait until no tick of the level claimed before this one is in flight, then submit."""
        try:
            while self._waiting(claim):
                with self._lock:
                    reason = self.cancelled.pop(claim.tick_id, None)
                    if reason is None and not self.stopping.is_set():
                        self.wake.wait(POLL_SECONDS)
                        reason = self.cancelled.pop(claim.tick_id, None)
                if reason is not None or self.stopping.is_set():
                    self.executor.never_started(claim, reason)
                    return
            self.executor.submit(claim)
        finally:
            self.release(claim)

    def _waiting(self, claim: SlotClaim) -> bool:
        """Whether a tick ahead of this one is in flight; while the store is out, yes."""
        try:
            return bool(ahead_of(claim.tick_id, self.in_flight(claim.level)))
        except StoreError as exc:
            self.store_failed(exc)
            return True
