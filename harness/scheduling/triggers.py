"""When levels fire: APScheduler's triggers, and the slot each firing stands for.

Only the triggers are used, not APScheduler's scheduler: a slot is the trigger's fire
time itself (which APScheduler 3 does not hand its jobs), and slot uniqueness across
replicas lives in the event store, not in a job store. The configuration builds the
triggers (`Scheduled.trigger`), so a schedule that cannot fire is refused at load.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apscheduler.triggers.base import BaseTrigger

from harness.config import Scheduled


def level_trigger(config: Scheduled) -> BaseTrigger:
    """The trigger of a level or digest; the configuration built it once when it loaded."""
    return config.trigger()


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
