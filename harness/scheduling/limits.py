"""`max_runs`: a level whose slots have run that many times fires no further slot.

The count is read from the ticks read model (`runs_of`) before each wave, so it
survives restarts and holds across replicas on one store. Slots past the limit are not
slots any more, as past `end_at`: nothing is claimed or recorded for them (a Temporal
Schedule's spent `remaining_actions`), and the service says so once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from harness.config import Settings
from harness.projections import runs_of
from harness.scheduling.timetable import Slot
from harness.store import EventStore

Report = Callable[[str], None]


class RunLimits:
    """Which slots of a wave its levels' `max_runs` still allow."""

    def __init__(self, settings: Settings, report: Report) -> None:
        """`report` hears once of each level that reached its `max_runs`."""
        self.report = report
        self.reached: set[str] = set()
        self.take(settings)

    def take(self, settings: Settings) -> None:
        """The levels that set `max_runs`: at start and at each reload."""
        self.limits = {
            name: level.max_runs for name, level in settings.levels.items() if level.max_runs
        }

    def within(
        self,
        store: EventStore,
        wave: Sequence[Slot],
        missed: Collection[Slot],
        catch_up: Callable[[], object],
    ) -> Sequence[Slot]:
        """`wave` less the slots of levels whose runs are spent.

        Every slot of a limited level that is not `missed` may run, so it uses one of the
        runs left (a slot then skipped for a pause returns its run at the next wave's
        count): a wave never fires more than the limit. `catch_up` brings the ticks read
        model up to date first.

        Raises:
            StoreError: the count cannot be read (the wave is owed, as any).
        """
        limited = {level for _, level in wave if level in self.limits}
        if not limited:
            return wave
        catch_up()
        ran = runs_of(store, {level: self.limits[level] for level in limited})
        left = {level: self.limits[level] - count for level, count in ran.items()}
        kept: list[Slot] = []
        for slot, level in wave:
            if level in left and left[level] <= 0:
                self._reached(level)
                continue
            if level in left and (slot, level) not in missed:
                left[level] -= 1
            kept.append((slot, level))
        return kept

    def _reached(self, level: str) -> None:
        if level not in self.reached:
            self.reached.add(level)
            self.report(f"{level}: max_runs ({self.limits[level]}) reached, no further slot fires")
