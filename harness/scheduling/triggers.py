"""When levels fire: APScheduler's triggers, and the slot each firing stands for.

Only the triggers are used, not APScheduler's scheduler: a slot is the trigger's fire
time itself (which APScheduler 3 does not hand its jobs), and slot uniqueness across
replicas lives in the event store, not in a job store. The configuration builds the
triggers (`Scheduled.trigger`), so a schedule that cannot fire is refused at load.

A cron schedule names wall-clock times, and daylight saving time makes some of them
happen twice (the autumn night repeats an hour) or never (the spring night skips one).
APScheduler's cron trigger fires at both instants of a repeated time and moves a skipped
one forward by the length of the jump (02:30 becomes 03:30): `next_slot` fires a
repeated time once, at its first instant, and a skipped one once, at the instant the
clocks jump. A schedule whose hour field is `*` fires every hour of elapsed time, so the
repeated hour is fired as any other hour (as cron does for such jobs).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger

from harness.config import LevelConfig, Scheduled
from harness.contracts import tick_id_for

_ONE_MICROSECOND = timedelta(microseconds=1)
_DAY_SECONDS = 86_400


class ScheduleEnded(ValueError):
    """The schedule has no further slot: its `end_at` has passed (or all is excluded)."""


def level_trigger(config: Scheduled) -> BaseTrigger:
    """The trigger of a level or digest; the configuration built it once when it loaded.

    A level with several specs, a window or exclusions fires through one `LevelSchedule`
    (`harness.scheduling.windows`); a plain one through its spec's own trigger.
    """
    triggers = config.triggers()
    if not isinstance(config, LevelConfig) or (
        len(triggers) == 1
        and config.start_at is None
        and config.end_at is None
        and not config.exclude
    ):
        return triggers[0]
    from harness.scheduling.windows import LevelSchedule

    zone = ZoneInfo(config.timezone)
    return LevelSchedule(
        triggers, zone, config.window_start(zone), config.window_end(zone), config.exclusions()
    )


def next_slot(trigger: BaseTrigger, previous: datetime | None, now: datetime) -> datetime:
    """The first slot after `previous` that is not before `now` (missed ones coalesce).

    Raises:
        ScheduleEnded: there is none (a level past its `end_at`).
    """
    after = now if previous is None else max(now, previous + _ONE_MICROSECOND)
    fire = _fire_time(trigger, previous, after)
    if isinstance(trigger, CronTrigger):
        fire = _on_the_wall_clock(trigger, fire, after)
    return fire.astimezone(UTC)


def upcoming_slot(trigger: BaseTrigger, now: datetime) -> datetime | None:
    """The next slot not before `now`, or None once the schedule has ended."""
    try:
        return next_slot(trigger, None, now)
    except ScheduleEnded:
        return None


def slot_tick_id(level: str, slot: datetime) -> str:
    """The tick id of a slot: the same in every replica, so its stream is the claim."""
    return tick_id_for(level, slot)


def _fire_time(trigger: BaseTrigger, previous: datetime | None, after: datetime) -> datetime:
    fire: datetime | None = trigger.get_next_fire_time(previous, after)
    if fire is None:
        raise ScheduleEnded("the schedule has no further fire time")
    return fire


def _on_the_wall_clock(trigger: CronTrigger, fire: datetime, after: datetime) -> datetime:
    """`fire`, or the slot it stands for: one per wall-clock time, whatever the clocks do.

    A repeated time fires at its first instant; a skipped one when the clocks jump.
    """
    every_hour = str(trigger.fields[CronTrigger.FIELD_NAMES.index("hour")]) == "*"
    while not every_hour and _repeated(_local(trigger, fire)):
        fire = fire.astimezone(UTC)  # local arithmetic would keep the repeated time
        fire = _fire_time(trigger, fire, fire + _ONE_MICROSECOND)
    if fire.replace(tzinfo=None) != _local(trigger, fire).replace(tzinfo=None):
        # A wall-clock time the spring night skips: its first instant after is the jump.
        return max(after, _jump_before(trigger, fire))
    return fire


def _repeated(local: datetime) -> bool:
    """Whether `local` is the second instant of a wall-clock time the autumn night repeats."""
    return local.fold == 1 and local.replace(fold=0).utcoffset() != local.utcoffset()


def _local(trigger: CronTrigger, fire: datetime) -> datetime:
    """The wall-clock time of the instant `fire` in the trigger's zone.

    APScheduler hands on a skipped wall-clock time as it computed it (an instant later by
    the jump), and `astimezone` to the zone a datetime already has changes nothing.
    """
    return fire.astimezone(UTC).astimezone(trigger.timezone)


def _jump_before(trigger: CronTrigger, fire: datetime) -> datetime:
    """The last instant within a day before `fire` at which the zone's UTC offset changed.

    Offsets change on whole seconds; halving a day of them takes 17 steps.
    """
    offset = _local(trigger, fire).utcoffset()
    later = int(fire.timestamp())
    earlier = later - _DAY_SECONDS
    while later - earlier > 1:
        middle = (earlier + later) // 2
        at = datetime.fromtimestamp(middle, trigger.timezone)
        if at.utcoffset() == offset:
            later = middle
        else:
            earlier = middle
    return datetime.fromtimestamp(later, UTC)
