"""When levels fire: APScheduler's triggers, and the slot each firing stands for.

Only the triggers are used, not APScheduler's scheduler: a slot is the trigger's fire
time itself (which APScheduler 3 does not hand its jobs), and slot uniqueness across
replicas lives in the event store, not in a job store. The configuration builds the
triggers (`Scheduled.trigger`), so a schedule that cannot fire is refused at load.

A cron schedule names wall-clock times, and daylight saving time makes some of them
happen twice (the autumn night repeats an hour) or never (the spring night skips one).
APScheduler's cron trigger fires at both instants of a repeated time and moves a skipped
one forward by the length of the jump (02:30 becomes 03:30). `next_slot` applies the
level's rules instead, which its trigger carries (`WallClockCron`): a repeated time fires
at its first instant (`dst_repeated = "first"`, the default), its second (`last`), both
(`both`: two slots, two tick ids) or neither (`none`); a skipped one once, at the instant
the clocks jump (`dst_skipped = "shift"`, the default), or not at all (`skip`). A
schedule whose hour field is `*` fires every hour of elapsed time, as cron does for such
jobs: both instants of the repeated hour, and nothing in the skipped one (its minutes do
not exist), whatever the rules say. Interval schedules are aligned to UTC and know no
daylight saving time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger

from harness.config import (
    DST_REPEATED,
    DST_SKIPPED,
    DstRepeated,
    DstSkipped,
    LevelConfig,
    Scheduled,
    WallClockCron,
)
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


def slots_between(
    trigger: BaseTrigger, start: datetime, end: datetime, most: int
) -> list[datetime]:
    """The slots in [start, end), at most `most` of them, as `next_slot` steps to them.

    A backfill or forecast lists up to 10,000 slots, and APScheduler's cron trigger takes
    about 16 µs a step. Within a local hour that daylight saving time leaves alone, a
    crontab's slots after the hour's first are its other allowed minutes, so those are
    filled in from the minute field; the trigger is asked once an hour.
    """
    minutes = _minute_values(trigger)
    slots: list[datetime] = []
    slot = next_slot(trigger, None, start)
    while slot < end and len(slots) < most:
        slots.append(slot)
        if minutes:
            rest = _rest_of_hour(trigger, slot, minutes)
            slots += [s for s in rest if s < end][: most - len(slots)]
            slot = slots[-1]
        slot = next_slot(trigger, slot, slot)
    return slots


def _minute_values(trigger: BaseTrigger) -> tuple[int, ...]:
    """The minutes a crontab without jitter fires in any hour it fires in (): none known)."""
    if not isinstance(trigger, CronTrigger) or trigger.jitter:
        return ()
    fields = dict(zip(CronTrigger.FIELD_NAMES, trigger.fields, strict=True))
    if str(fields["second"]) != "0":
        return ()
    minute = fields["minute"]
    at = datetime(2000, 1, 1)
    return tuple(m for m in range(60) if minute.get_next_value(at.replace(minute=m)) == m)


def _rest_of_hour(trigger: CronTrigger, slot: datetime, minutes: tuple[int, ...]) -> list[datetime]:
    """The slots after `slot` in its local hour, if daylight saving time leaves it alone."""
    local = slot.astimezone(trigger.timezone)
    if local.second or local.microsecond:
        return []
    first, last = local.replace(minute=0), local.replace(minute=59)
    offsets = {at.replace(fold=fold).utcoffset() for at in (first, last) for fold in (0, 1)}
    if len(offsets) != 1:
        return []
    rest = [slot + timedelta(minutes=m - local.minute) for m in minutes if m > local.minute]
    if trigger.end_date is not None:
        rest = [s for s in rest if s <= trigger.end_date]
    return rest


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
    """`fire`, or the slot it stands for under the trigger's daylight-saving rules."""
    repeated, skipped = dst_rules(trigger)
    every_hour = str(trigger.fields[CronTrigger.FIELD_NAMES.index("hour")]) == "*"
    while True:
        local = _local(trigger, fire)
        if fire.replace(tzinfo=None) != local.replace(tzinfo=None):
            # A wall-clock time the spring night skips: its first instant after is the jump.
            jump = max(after, _jump_before(trigger, fire))
            if skipped == "shift":
                return jump
            # Asked from the jump on: the instant APScheduler gives a skipped time lies
            # after the jump, past a real time it may name (03:00 when 02:30 is skipped).
            fire = _fire_time(trigger, jump - _ONE_MICROSECOND, jump)
        elif every_hour or _kept(local, repeated):
            return fire
        else:
            fire = fire.astimezone(UTC)  # local arithmetic would keep the repeated time
            fire = _fire_time(trigger, fire, fire + _ONE_MICROSECOND)


def dst_rules(trigger: BaseTrigger) -> tuple[DstRepeated, DstSkipped]:
    """The (repeated, skipped) rules a cron trigger fires by; the defaults for any other."""
    if isinstance(trigger, WallClockCron):
        return trigger.repeated, trigger.skipped
    return DST_REPEATED, DST_SKIPPED


def _kept(local: datetime, rule: str) -> bool:
    """Whether `rule` fires the wall-clock time `local` at this instant of it.

    A time the autumn night repeats has two instants (`fold` 0, then 1); any other has one.
    """
    if local.replace(fold=1 - local.fold).utcoffset() == local.utcoffset():
        return True
    return rule == "both" or rule == ("first", "last")[local.fold]


def _local(trigger: CronTrigger, fire: datetime) -> datetime:
    """The wall-clock time of the instant `fire` in the trigger's zone.

    APScheduler hands on a skipped wall-clock time as it computed it (an instant later by
    the jump), and `astimezone` to the zone a datetime already has changes nothing.
    """
    return fire.astimezone(UTC).astimezone(trigger.timezone)


def _jump_before(trigger: CronTrigger, fire: datetime) -> datetime:
    """The last instant within a day before `fire` at which the zone's UTC offset changed."""
    later = int(fire.timestamp())
    return offset_change(trigger.timezone, later - _DAY_SECONDS, later)


def offset_change(zone: tzinfo, earlier: int, later: int) -> datetime:
    """The instant in (earlier, later] (Unix seconds) at which the zone's offset changes.

    The offset at `later` must differ from that at `earlier`; offsets change on whole
    seconds, so halving a day of them takes 17 steps.
    """
    offset = datetime.fromtimestamp(later, zone).utcoffset()
    while later - earlier > 1:
        middle = (earlier + later) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset:
            later = middle
        else:
            earlier = middle
    return datetime.fromtimestamp(later, UTC)
