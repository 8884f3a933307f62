"""A level's whole schedule as one trigger: several specs, a window and exclusions.

A level may name several cron expressions and an interval; it fires at the time any of
them names, once. `start_at` and `end_at` bound its slots and `exclude` (dates, cron
expressions, in the level's zone) drops some of them: an excluded slot is not a slot at
all (nothing is claimed or recorded for it), as a Temporal Schedule's excluded calendar
times are not actions. Each spec keeps its own daylight-saving handling
(`harness.scheduling.triggers.next_slot`) before the union is taken and filtered.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger

from harness.config import Exclusion

MAX_EXCLUDED = 100_000
"""Excluded slots passed over in one search at most: a schedule excluded for longer than
that (a minute schedule excluded for ten weeks) is taken to have ended."""


class LevelSchedule(BaseTrigger):  # type: ignore[misc]
    """The union of a level's triggers, within its window, less its exclusions."""

    __slots__ = ("end", "exclusions", "start", "triggers", "zone")

    def __init__(
        self,
        triggers: Sequence[BaseTrigger],
        zone: ZoneInfo,
        start: datetime | None = None,
        end: datetime | None = None,
        exclusions: Sequence[Exclusion] = (),
    ) -> None:
        """Triggers (each fires as `next_slot` fires it), a window and exclusions in `zone`."""
        self.triggers = list(triggers)
        self.zone = zone
        self.start = start
        self.end = end
        self.exclusions = list(exclusions)

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """The first slot of any trigger after `previous_fire_time`, not before `now`.

        Inside the window and not excluded; None once the window has closed.
        """
        from harness.scheduling.triggers import ScheduleEnded, next_slot

        previous = previous_fire_time
        if self.start is not None and now < self.start:
            previous, now = None, self.start
        for _ in range(MAX_EXCLUDED):
            candidates = []
            for trigger in self.triggers:
                try:
                    candidates.append(next_slot(trigger, previous, now))
                except ScheduleEnded:
                    continue
            if not candidates:
                return None
            slot = min(candidates)
            if self.end is not None and slot > self.end:
                return None
            if not self.excluded(slot):
                return slot
            previous, now = slot, slot
        return None

    def excluded(self, slot: datetime) -> bool:
        """Whether an `exclude` entry names the slot's wall-clock time."""
        local = slot.astimezone(self.zone)
        return any(exclusion.matches(local) for exclusion in self.exclusions)

    def __str__(self) -> str:
        """For APScheduler's messages: the specs it joins."""
        return " | ".join(str(trigger) for trigger in self.triggers)
