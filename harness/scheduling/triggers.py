"""When levels fire: APScheduler's triggers, and the slot each firing stands for.

Only the triggers are used, not APScheduler's scheduler: a slot is the trigger's fire
time itself (which APScheduler 3 does not hand its jobs), and slot uniqueness across
replicas lives in the event store, not in a job store. Intervals are aligned to a fixed
epoch so that every replica computes the same slots.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from harness.config import Scheduled, parse_interval

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


def level_trigger(config: Scheduled) -> BaseTrigger:
    """The APScheduler trigger of a level or digest: a fixed interval or a cron line."""
    if config.every is not None:
        return IntervalTrigger(
            seconds=parse_interval(config.every), start_date=EPOCH, timezone="UTC"
        )
    assert config.schedule is not None
    return CronTrigger.from_crontab(config.schedule, timezone=config.timezone)


def next_slot(trigger: BaseTrigger, previous: datetime | None, now: datetime) -> datetime:
    """The first slot after `previous` that is not before `now` (missed ones coalesce)."""
    after = now if previous is None else max(now, previous + timedelta(microseconds=1))
    fire: datetime | None = trigger.get_next_fire_time(previous, after)
    if fire is None:
        raise ValueError("the schedule has no further fire time")
    return fire.astimezone(UTC)


def slot_tick_id(level: str, slot: datetime) -> str:
    """The tick id of a slot: the same in every replica, so its stream is the claim."""
    return f"{level}-{slot.astimezone(UTC):%Y%m%dT%H%M%SZ}"
