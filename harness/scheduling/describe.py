"""`tickwork levels`: each level's schedule described, as a Temporal Schedule's describe.

Its schedule in words, the next fire times (jitter included) in its zone and in UTC, its
last runs and how they ended, its runs against `max_runs`, its pause (who, why, since
when, the note), and for a cron schedule the zone's next daylight-saving change with the
slots the level fires around it (`harness.scheduling.transitions`). Built from the
configuration and bounded reads of the read models: the newest few ticks per level along
the (level, list time) index and the pause events of the level streams, never a scan of
history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from harness.config import Settings
from harness.prices import PriceBook
from harness.projections import latest_ticks, pauses, projector_for, runs_of
from harness.scheduling.budget import Budgets
from harness.scheduling.budget_watch import BUDGET_ACTOR, budget_statuses, held_paused
from harness.scheduling.jitter import FireTimes
from harness.scheduling.transitions import Transition, level_transition
from harness.scheduling.triggers import ScheduleEnded, level_trigger, next_slot
from harness.scheduling.words import schedule_words
from harness.store import EventStore

NEXT = 5
"""Fire times shown per level."""
RECENT = 5
"""Last runs shown per level."""


@dataclass(frozen=True)
class FireTime:
    """An upcoming slot and when it fires (the slot plus the level's jitter)."""

    slot: datetime
    fires_at: datetime
    """In UTC."""
    fires_at_local: datetime
    """The same instant in the level's zone."""


@dataclass(frozen=True)
class Run:
    """One of the level's last ticks and how it ended (or `scheduled`/`running`)."""

    tick_id: str
    status: str
    reason: str | None
    at: datetime


@dataclass(frozen=True)
class Pause:
    """The pause in force: who decided it, why, since when, and the operator's note."""

    by: str
    reason: str
    since: datetime
    note: str | None
    resumes_at: datetime | None = None
    """A budget's pause: when it lifts by itself (the end of the window holding it)."""


@dataclass(frozen=True)
class LevelDescription:
    """Everything `tickwork levels` says of one level."""

    name: str
    schedule: str
    """As configured: `0 9 * * mon-fri; every 30m`."""
    words: str
    timezone: str
    jitter_seconds: float
    next: list[FireTime]
    """Empty once the schedule has ended (past `end_at`, or `max_runs` reached)."""
    recent: list[Run]
    max_runs: int | None
    runs: int | None
    """Slots that ran, counted up to `max_runs` (None without a limit)."""
    paused: Pause | None
    dst: Transition | None = None
    """The zone's next daylight-saving change and the slots around it (cron schedules)."""
    refused: str | None = None
    """Why the level cannot run on this host and how to fix it (`Settings.refusal`)."""


def describe_levels(
    settings: Settings, store: EventStore, levels: Sequence[str], now: datetime
) -> list[LevelDescription]:
    """The description of each of `levels` (configured names), read at `now`.

    The caller brings the ticks read model up to date first.
    """
    fire_times = FireTimes(settings)
    in_force = pauses(store, levels)
    resumes = (
        _budget_pause_ends(settings, store, now)
        if any(pause.by == BUDGET_ACTOR for pause in in_force.values())
        else {}
    )
    recent = latest_ticks(store, levels, RECENT)
    runs = runs_of(
        store,
        {name: limit for name in levels if (limit := settings.levels[name].max_runs) is not None},
    )
    described = []
    for name in levels:
        config = settings.levels[name]
        pause = in_force.get(name)
        refused = settings.refusal(name)
        left = NEXT if config.max_runs is None else min(NEXT, config.max_runs - runs[name])
        left = 0 if refused else left
        described.append(
            LevelDescription(
                name=name,
                schedule=config.schedule_text,
                words=schedule_words(config, settings.jitter_for(name)),
                timezone=config.timezone,
                jitter_seconds=settings.jitter_for(name),
                next=_next(settings, fire_times, name, now, left),
                recent=[Run(m.tick_id, m.status, m.reason, m.at) for m in recent.get(name, [])],
                max_runs=config.max_runs,
                runs=runs.get(name),
                paused=Pause(
                    pause.by,
                    pause.reason,
                    pause.occurred_at,
                    pause.note,
                    resumes.get(name, now) if pause.by == BUDGET_ACTOR else None,
                )
                if pause
                else None,
                dst=level_transition(config, now) if config.crons else None,
                refused=refused,
            )
        )
    return described


def _budget_pause_ends(settings: Settings, store: EventStore, now: datetime) -> dict[str, datetime]:
    """Level -> when the `pause` budgets holding it at their limit have a new window.

    A level a budget paused that none holds now resumes at the watch's next poll (`now`).
    """
    prices = PriceBook(settings.prices)
    budgets = Budgets(store, projector_for(store, prices), prices, settings)
    return held_paused(budgets, budget_statuses(budgets, now))


def _next(
    settings: Settings, fire_times: FireTimes, level: str, now: datetime, count: int
) -> list[FireTime]:
    """The level's next `count` slots that fire after `now` (a jittered slot may lie before).

    `count` is at most the runs `max_runs` leaves.
    """
    config = settings.levels[level]
    trigger, zone = level_trigger(config), ZoneInfo(config.timezone)
    found: list[FireTime] = []
    try:
        slot = next_slot(trigger, None, now - timedelta(seconds=settings.jitter_for(level)))
        while len(found) < count:
            fires = fire_times.fire_at(level, slot)
            if fires >= now:
                found.append(FireTime(slot, fires, fires.astimezone(zone)))
            slot = next_slot(trigger, slot, slot)
    except ScheduleEnded:
        pass
    return found
