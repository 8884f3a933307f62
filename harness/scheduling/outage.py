"""Riding out a store outage: saying so once, and settling what it left owed once it ends.

While the store does not answer, the service goes on: running ticks stay supervised and
their events are spooled, slots that cannot be claimed are owed, and claims whose commit
the store lost contact in are unsure. When the store answers again, the unsure claims are
looked up (handed on if they did land) and the owed slots are claimed, as a restart would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from harness.config import Settings
from harness.contracts import tick_stream, utcnow
from harness.scheduling.timetable import Slot
from harness.scheduling.triggers import slot_tick_id
from harness.scheduling.waves import Decision, SlotClaim, missed_slots
from harness.store import EventStore, StoreError

Report = Callable[[str], None]
Fire = Callable[[Sequence[Slot], Collection[Slot]], None]
"""Decides and claims slots, recording those of the second argument skipped (`missed`)."""
HandOn = Callable[[SlotClaim, Decision], None]


class Outage:
    """Says once that the store stopped answering, and once that it is back.

    Meanwhile the service goes on: running ticks stay supervised, their events are
    spooled, slots that cannot be claimed are owed, and when the store answers again the
    spool is ingested and the owed slots are claimed (`OwedSlots`).
    """

    def __init__(self, report: Report) -> None:
        self.report = report
        self.since: float | None = None
        self._lock = threading.Lock()
        """Threads of an executor share one: each tick that waits does not say it again."""

    def failed(self, exc: StoreError) -> None:
        """A store call failed: said once, when the outage begins."""
        with self._lock:
            if self.since is not None:
                return
            self.since = time.monotonic()
        self.report(f"store unreachable, riding it out (events are spooled): {exc}")

    def over(self) -> None:
        """A store call succeeded: said once, when an outage ends."""
        with self._lock:
            since, self.since = self.since, None
        if since is not None:
            self.report(f"store back after {time.monotonic() - since:.0f} s")


class OwedSlots:
    """Slots the store was out for and claims it may have lost, until they are settled."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self._lock = threading.Lock()
        self.unsure: list[tuple[SlotClaim, Decision]] = []
        """Claims whose transaction the store lost contact in: committed or not."""
        self.slots: list[Slot] = []
        """Slots due while the store was out and never claimed: claimed once it is back."""

    def unsure_of(self, plans: Sequence[tuple[SlotClaim, Decision]]) -> None:
        """A wave's claim failed: its ticks that would run may have been claimed after all."""
        with self._lock:
            self.unsure.extend((c, d) for c, d in plans if d in ("run", "buffer"))

    def owe(self, wave: Sequence[Slot]) -> None:
        """A wave could not be claimed: its slots are owed, except the unsure claims'."""
        with self._lock:
            unsure = {claim.tick_id for claim, _ in self.unsure}
            self.slots.extend(s for s in wave if slot_tick_id(s[1], s[0]) not in unsure)

    def settle_unsure(self, store: EventStore, hand_on: HandOn) -> None:
        """Hand on the claims a store outage cut off whose commit did land after all.

        Its TickScheduled carries the claim's own id, so a stream another replica claimed
        is never taken for ours. Raises StoreError while the store is still out.
        """
        while True:
            with self._lock:
                if not self.unsure:
                    return
                claim, decision = self.unsure[0]
            stream = store.read_stream(tick_stream(claim.tick_id))
            with self._lock:
                self.unsure.pop(0)
            if stream and stream[0].event_id == claim.claim_id:
                self.report(f"{claim.tick_id} was claimed here before the store went away")
                hand_on(claim, decision)
            elif not stream and claim.slot is not None:
                with self._lock:
                    self.slots.append((claim.slot, claim.level))

    def settle(
        self,
        settings: Settings,
        fire: Fire,
        fire_at: Callable[[str, datetime], datetime] = lambda level, slot: slot,
    ) -> None:
        """Claim the slots that fell due while the store was out, as a restart would.

        Each is recorded skipped (`missed`), except a level's latest when it lies within
        the level's catch-up window: that one runs now. Raises StoreError while the store
        is still out (the slots stay owed).
        """
        with self._lock:
            owed, self.slots = sorted(self.slots), []
        owed = [slot for slot in owed if slot[1] in settings.levels]  # a level reloaded away
        if not owed:
            return
        missed = missed_slots(settings, owed, utcnow(), fire_at)
        self.report(f"{len(owed)} slot(s) due while the store was out: {len(missed)} missed")
        fire(owed, missed)
        with self._lock:
            if self.slots:
                raise StoreError("the store went away again while owed slots were claimed")
