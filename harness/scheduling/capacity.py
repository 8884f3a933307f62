"""How many slots a minute the levels ask for, beside how many ticks the service can start.

The local executor starts ticks at least `[runner] start_spacing_seconds` apart (0.25 s:
at most 240 a minute) and runs `[runner] max_concurrent` at once. A configuration whose
levels ask for more goes wrong quietly: ticks wait in the queue, and a level whose tick
still waits has its next slots skipped `overlap` (60 levels every 5 s ask for 720 a
minute). Demand is read from the schedules alone, without walking their fire times, so
it costs microseconds a level: an interval's slots are 60 over its seconds; a cron
expression's are its matching minutes times its matching hours over a day's 1,440
minutes (its fields counted, a few dozen look-ups), on a day it fires at all (its day
fields are not averaged in: a weekday level asks as much on a Monday as a daily one).
Several specs of one level add up, a time both name counted twice: an upper bound.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace

from apscheduler.triggers.cron import CronTrigger

from harness.config import LevelConfig, Settings, crontab_trigger, parse_interval
from harness.projections import TickInFlight, mean_run_seconds, paused_levels
from harness.scheduling.triggers import level_trigger, upcoming_slot
from harness.store import EventStore, StoreError

MINUTES_A_DAY = 1440
FIELD_RANGES = {"minute": (0, 59), "hour": (0, 23)}


def slots_a_minute(config: LevelConfig) -> float:
    """The level's slots a minute, averaged over a day it fires (see the module's note)."""
    rate = 0.0 if config.every is None else 60 / parse_interval(config.every)
    return rate + sum(map(_cron_rate, config.crons))


@functools.lru_cache(maxsize=4096)
def _cron_rate(cron: str) -> float:
    """A cron expression's slots a minute on a day it fires; its zone changes nothing.

    Kept per expression: building its trigger is most of the cost, and levels share few.
    """
    trigger = crontab_trigger(cron, "UTC")
    return _values(trigger, "minute") * _values(trigger, "hour") / MINUTES_A_DAY


def _values(trigger: CronTrigger, name: str) -> int:
    """How many values of the cron field `name` fire (`*/5` minutes: 12)."""
    field = trigger.fields[CronTrigger.FIELD_NAMES.index(name)]
    count, (value, last) = 0, FIELD_RANGES[name]
    while value <= last:
        found = field.get_next_value(SimpleNamespace(**{name: value}))
        if found is None or found > last:
            break
        count, value = count + 1, found + 1
    return count


def level_rates(levels: Mapping[str, LevelConfig], left_out: Collection[str]) -> dict[str, float]:
    """Each level's slots a minute, those named in `left_out` aside.

    A level whose schedule has ended (past its `end_at`) is left out too.
    """
    now = datetime.now(UTC)
    return {
        name: slots_a_minute(config)
        for name, config in levels.items()
        if name not in left_out
        and (config.end_at is None or upcoming_slot(level_trigger(config), now) is not None)
    }


@dataclass(frozen=True)
class Capacity:
    """The levels' demand beside what the start spacing and the places allow."""

    demand: float
    """Slots a minute, the levels' schedules together."""
    levels: int
    """The levels counted (paused and refused ones are not)."""
    spacing_seconds: float
    """Least time between two starts; 0: not spaced (procrastinate workers do not space)."""
    places: int | None
    """Ticks running at once (None: the procrastinate workers' concurrency decides)."""
    run_seconds: float | None = None
    """How long a tick runs, as the levels' ended ticks did (None: none ran yet)."""

    @property
    def by_spacing(self) -> float | None:
        """Starts a minute the spacing allows (None: unspaced)."""
        return 60 / self.spacing_seconds if self.spacing_seconds > 0 else None

    @property
    def by_places(self) -> float | None:
        """Ticks a minute the places can run at the mean run time (None: not known)."""
        if self.places is None or not self.run_seconds:
            return None
        return self.places * 60 / self.run_seconds

    def limit(self) -> tuple[str, float] | None:
        """What caps the starts first, and how many a minute; None: nothing known does."""
        caps = [
            (f"the start spacing ({self.spacing_seconds:g} s)", self.by_spacing),
            (f"{self.places} places at {self.run_seconds or 0:.1f} s a tick", self.by_places),
        ]
        known = [(what, rate) for what, rate in caps if rate is not None]
        return min(known, key=lambda cap: cap[1]) if known else None

    def words(self) -> str:
        """Demand and each cap on one line, for `status` and the dashboard."""
        said = f"demand {rate(self.demand)} slots a minute ({self.levels} level(s))"
        if self.by_spacing is not None:
            said += (
                f"; the start spacing ({self.spacing_seconds:g} s) allows "
                f"{rate(self.by_spacing)} starts a minute"
            )
        else:
            said += "; starts are not spaced"
        if self.places is None:
            return said + "; the workers' places run them"
        said += f"; {self.places} places"
        if self.by_places is None:
            said += " at once (no tick of theirs has run yet to time them)"
        else:
            said += f" allow about {rate(self.by_places)} a minute"
            said += f" at {self.run_seconds:.1f} s a tick"
        return said

    def warning(self) -> str | None:
        """Why the service cannot keep up with its levels, if it cannot; else None."""
        limit = self.limit()
        if limit is None or self.demand <= limit[1]:
            return None
        what, allowed = limit
        return (
            f"capacity: the levels ask for {rate(self.demand)} slots a minute, more than "
            f"{what} allows ({rate(allowed)} a minute): ticks wait in the queue, and slots "
            "whose level's tick still waits are skipped (overlap); see `tickwork status`, "
            "[runner] start_spacing_seconds and max_concurrent"
        )


def rate(per_minute: float) -> str:
    """A rate a minute as people read it: whole from 100 on, else three figures."""
    return f"{per_minute:,.0f}" if per_minute >= 100 else f"{per_minute:.3g}"


def capacity_of(
    settings: Settings, paused: Collection[str], run_seconds: Mapping[str, float]
) -> Capacity:
    """The capacity of a service on `settings`, its `paused` and refused levels aside.

    `run_seconds`: each level's mean run time; their mean, weighted by each level's
    demand, is how long a place stays taken.
    """
    rates = level_rates(settings.levels, {*paused, *settings.refused_levels()})
    timed = {name: r for name, r in rates.items() if name in run_seconds and r > 0}
    weight = sum(timed.values())
    run = sum(r * run_seconds[name] for name, r in timed.items()) / weight if weight else None
    spacing, places = starts_of(settings)
    return Capacity(sum(rates.values()), len(rates), spacing, places, run)


def starts_of(settings: Settings) -> tuple[float, int | None]:
    """The start spacing and the places of the service's executor.

    The local executor spaces its starts and has `max_concurrent` places; procrastinate
    workers space none (beyond an outage's throttle), and their concurrency is theirs.
    """
    if settings.executor.kind != "local":
        return 0.0, None
    return settings.runner.start_spacing_seconds, settings.runner.max_concurrent


@dataclass
class SlotHolders:
    """What held the slots of one wave skipped `overlap`: each level's tick in flight.

    The ticks in flight of every level are read once, and only when a holder waits for a
    place: how many wait ahead of it and how many places are taken say why it still does.
    """

    flying: Sequence[TickInFlight]
    """The wave's levels' ticks in flight, oldest claim first."""
    everyone: Callable[[], Sequence[TickInFlight]]
    """Every level's ticks in flight (a read of the store)."""
    settings: Settings
    now: datetime
    _all: Sequence[TickInFlight] | None = field(default=None, init=False)

    def words(self, level: str) -> str:
        """Why the level's new slot is skipped, for the service's log."""
        said = f"a tick of {level} is still in flight"
        holder = next((tick for tick in self.flying if tick.level == level), None)
        if holder is None:
            return f"{said}: claimed in this wave"
        if holder.status == "running":
            return f"{said}: {holder.tick_id}, running for {holder.runtime(self.now) or 0:.1f} s"
        if self._all is None:
            self._all = self.everyone()
        key = _claimed(holder)
        ahead = sum(1 for t in self._all if t.status == "scheduled" and _claimed(t) < key)
        running = sum(1 for t in self._all if t.status == "running")
        place = f"behind {ahead} other tick(s)" if ahead else "first in the queue"
        said += f": {holder.tick_id}, queued for {holder.waited(self.now) or 0:.1f} s, {place}"
        spacing, places = starts_of(self.settings)
        why = [] if places is None else [f"{running} of {places} places taken"]
        if spacing > 0:
            why.append(f"starts {spacing:g} s apart: at most {rate(60 / spacing)} a minute")
        return said + (f" ({'; '.join(why)})" if why else "")


def _claimed(tick: TickInFlight) -> tuple[datetime, str]:
    return tick.scheduled_at or datetime.min.replace(tzinfo=UTC), tick.tick_id


def read_capacity(
    settings: Settings, store: EventStore, paused: Collection[str] | None = None
) -> Capacity:
    """The capacity of a service on `settings` as the store has its levels now.

    `paused`: the levels paused, when the caller has read them already.
    """
    names = list(settings.levels)
    paused = paused_levels(store, names) if paused is None else paused
    return capacity_of(settings, paused, mean_run_seconds(store, names))


class CapacityWatch:
    """The service's log line when its levels ask for more than it can start.

    Said once at start, and again only when a reload changes what it says (and once when
    a reload brings the demand back within the caps).
    """

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self.said: str | None = None

    def check(self, settings: Settings, store: EventStore) -> None:
        """Read the capacity and say what changed; a store that does not answer says nothing."""
        try:
            capacity = read_capacity(settings, store)
        except StoreError:
            return
        warning = capacity.warning()
        if warning == self.said:
            return
        if warning is not None:
            self.report(warning)
        else:
            self.report(f"capacity: {capacity.words()}: within what the service can start")
        self.said = warning
