"""A month of ticks on a simulated clock, archived each simulated day: retention's soak run.

Ticks are appended through the store's real append, stamped by a clock the store was
opened with (`open_store(clock=...)`), with real result and log files in the results
folder; at each simulated midnight the real archive run takes the days older than
`hot_days`. The retention test runs a month of a few ticks a day, and
ops/bench/retention_soak.py a larger one, printing what each day leaves behind: with
`hot_days = N` the hot store and the results folder stop growing after N days.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from typing import Any

from harness.config import Settings
from harness.contracts import (
    Event,
    TickCompleted,
    TickScheduled,
    TickStarted,
    ToolCalled,
)
from harness.scheduling import Archiver
from harness.store import Footprint, SqlEventStore, footprint
from workers import CallBooking, CallFacts

ARCHIVE_AFTER_MIDNIGHT = timedelta(minutes=5)
"""When, in a simulated day, the daily archive run takes the days before the cutoff."""


@dataclass
class SimulatedClock:
    """The store's clock in a soak run: it says whatever time the run set last."""

    now: datetime

    def __call__(self) -> datetime:
        """The simulated now: each append made before the run moves it is stamped with it."""
        return self.now


def tick_events(tick_id: str, results: Path, tokens: int, day: date) -> list[Event]:
    """A completed tick with spend, a tool call, and its result and log files on disk.

    The files lie where the runner puts them: `<results>/<level>/<day>/<tick id>.json`.
    """
    folder = results / "min" / day.isoformat()
    folder.mkdir(parents=True, exist_ok=True)
    result, log = folder / f"{tick_id}.json", folder / f"{tick_id}.log"
    result.write_text('{"ok": true}', encoding="utf-8")
    log.write_text("worker said hello\n", encoding="utf-8")
    common: dict[str, Any] = {"tick_id": tick_id, "level": "min"}
    return [
        TickScheduled(**common, model="m"),
        TickStarted(**common, pid=1, host="h", result_path=str(result), log_path=str(log)),
        CallBooking(tick_id, "min").spent(
            CallFacts(model="m", call=1, prompt_tokens=tokens, completion_tokens=7)
        ),
        ToolCalled(**common, name="shell", status="ok"),
        TickCompleted(**common, result_path=str(result), prompt_tokens=tokens),
    ]


@dataclass(frozen=True)
class DayLeft:
    """What the hot side holds after a simulated day's archive run."""

    day: date
    store: Footprint
    result_days: frozenset[date]
    """Days whose result or log files are still in the results folder."""
    result_files: int
    results_bytes: int
    archive_bytes: int


class Soak:
    """Appends simulated days of ticks and runs the archive after each, as `tickwork run` would."""

    def __init__(
        self,
        settings: Settings,
        store: SqlEventStore,
        clock: SimulatedClock,
        ticks_per_day: int,
        report: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.ticks_per_day = ticks_per_day
        self.archiver = Archiver(settings, store, report)

    def day(self, day: date) -> DayLeft:
        """Run `day`'s ticks, spread over it, then the archive run just after its midnight."""
        start = datetime.combine(day, time(), UTC)
        step = timedelta(days=1) / self.ticks_per_day
        for n in range(self.ticks_per_day):
            tick_id = f"{day:%Y%m%d}-{n}"
            self.clock.now = start + n * step
            for event in tick_events(tick_id, self.settings.paths.results, 100 + n, day):
                self.store.append(f"tick-{tick_id}", [event.to_record()])
                self.clock.now += timedelta(seconds=1)
        self.clock.now = start + timedelta(days=1) + ARCHIVE_AFTER_MIDNIGHT
        self.archiver.archive(before=self.archiver.cutoff(self.clock.now))
        return self.left(day)

    def left(self, day: date) -> DayLeft:
        """Measure the hot side (a walk of both folders and a scan of the store)."""
        results = self.settings.paths.results
        files = [path for path in results.rglob("*") if path.is_file()]
        return DayLeft(
            day,
            footprint(self.store),
            frozenset(date.fromisoformat(path.parent.name) for path in files),
            len(files),
            sum(path.stat().st_size for path in files),
            sum(path.stat().st_size for path in self.settings.retention.archive.rglob("*.gz")),
        )
