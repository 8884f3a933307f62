"""The one timetable loop: jobs with a trigger, woken at the earliest next slot.

Levels and digests fire on the same loop (each in a thread of its own): it sleeps until
the earliest upcoming slot of any job and hands every slot due by then to a callback as
one batch, in slot order. No slot is dropped: those that fell due while the callback (or
`wake`) was held up, by a slow wave or a store call that hangs, come in the next batch,
the latest `MAX_DUE` of each job, and the callback decides what a late slot becomes (the
service follows the level's catch-up policy, digests publish the latest period). The
sleep is cut into `poll_seconds` pieces so that `wake` (the service follows the control
stream there) runs often and a stop is seen at once.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta

from apscheduler.triggers.base import BaseTrigger

from harness.contracts import utcnow
from harness.scheduling.triggers import ScheduleEnded, next_slot

Slot = tuple[datetime, str]
"""A slot time and the name of its job (a level, a digest)."""
POLL_SECONDS = 0.5
MAX_DUE = 1000
"""Slots of one job handed in one batch at most: the latest (a host asleep for a day)."""


class Timetable:
    """The next slot of every job, advanced as slots fire, shared by levels and digests.

    A job with a jitter (`harness.scheduling.jitter`) is due at its slot's fire time, not
    at the slot, and hands on the slot itself; a job whose schedule has ended (a level past
    its `end_at`) leaves the timetable.
    """

    def __init__(
        self,
        triggers: Mapping[str, BaseTrigger],
        after: datetime,
        fire_at: Callable[[str, datetime], datetime] = lambda name, slot: slot,
        jittered: Mapping[str, float] = {},
    ) -> None:
        """Jobs by name; their first slots are the first that fire not before `after`.

        `fire_at` gives a slot's fire time; `jittered` names the jobs whose fire times lie
        up to that many seconds after their slots.
        """
        self.triggers = dict(triggers)
        self.fire_at = fire_at
        self.upcoming: dict[str, datetime] = {}
        self.fires: dict[str, datetime] = {}
        """When each upcoming slot fires (its slot, for a job without jitter)."""
        for name, trigger in self.triggers.items():
            try:
                slot = next_slot(trigger, None, after - timedelta(seconds=jittered.get(name, 0)))
                while fire_at(name, slot) < after:
                    slot = next_slot(trigger, slot, slot)
            except ScheduleEnded:
                continue
            self._set(name, slot)

    def retime(
        self, triggers: Mapping[str, BaseTrigger], changed: Collection[str], now: datetime
    ) -> None:
        """Take a reloaded set of jobs: gone ones stop, new and `changed` ones are timed anew.

        A new or changed job's next slot is its first not before the earlier of its old next
        slot and `now`, so a slot that fell due since the loop last looked still fires, and
        a job whose schedule did not change keeps the slot it had. Call it from the loop's
        own thread (its `wake`), never from another.
        """
        self.triggers = dict(triggers)
        for name in [name for name in self.upcoming if name not in self.triggers]:
            self._drop(name)
        for name, trigger in self.triggers.items():
            if name in changed or name not in self.upcoming:
                after = min(self.upcoming.get(name, now), now)
                try:
                    self._set(name, next_slot(trigger, None, after))
                except ScheduleEnded:
                    self._drop(name)

    def run(
        self,
        stopping: threading.Event,
        fire: Callable[[list[Slot]], None],
        wake: Callable[[], None] = lambda: None,
        poll_seconds: float = POLL_SECONDS,
        gap_seconds: float = 0.0,
    ) -> None:
        """Hand due slots to `fire` until `stopping` is set; `wake` runs every `poll_seconds`.

        Not on every wake-up: with jittered levels the loop wakes for each fire time, many
        a second, and `wake` (the control stream, the pauses of every level) costs reads.
        Batches are handed `gap_seconds` apart at least: slots whose fire times fall
        within one gap go in one batch (1,000 jittered levels a minute are a few claims
        a second, not one claim per slot), each at most that much later.
        """
        woken = fired = float("-inf")
        while not stopping.is_set():
            wait = fired + gap_seconds - time.monotonic()
            if wait > 0 and stopping.wait(wait):
                return
            if time.monotonic() - woken >= poll_seconds:
                wake()
                woken = time.monotonic()
            now = utcnow()
            names = [name for name, at in self.fires.items() if at <= now]
            due = sorted(slot for name in names for slot in self._due(name, now))
            if not due:
                soonest = min(self.fires.values(), default=None)
                delay = poll_seconds if soonest is None else (soonest - now).total_seconds()
                stopping.wait(min(delay, poll_seconds))
                continue
            fired = time.monotonic()
            fire(due)

    def _due(self, name: str, now: datetime) -> deque[Slot]:
        """The job's slots due by `now` (the latest MAX_DUE), moving it on past them."""
        due: deque[Slot] = deque(maxlen=MAX_DUE)
        slot, trigger = self.upcoming[name], self.triggers[name]
        try:
            while self.fire_at(name, slot) <= now:
                due.append((slot, name))
                slot = next_slot(trigger, slot, slot)
        except ScheduleEnded:
            self._drop(name)
        else:
            self._set(name, slot)
        return due

    def _set(self, name: str, slot: datetime) -> None:
        self.upcoming[name] = slot
        self.fires[name] = self.fire_at(name, slot)

    def _drop(self, name: str) -> None:
        self.upcoming.pop(name, None)
        self.fires.pop(name, None)
