"""Cron expressions read as crontab reads them, weekday numbers included.

APScheduler 3's `CronTrigger.from_crontab` numbers weekdays from Monday (0 = mon), so the
operator's `0 9 * * 1-5` would fire Tuesday to Saturday. crontab numbers them from
Sunday (0 and 7 = sun). Every numeric item of the weekday field is expanded here to the
days crontab means and written as names, which APScheduler reads unambiguously: a range
that wraps past Saturday under APScheduler's numbering (`0-3`, Sunday to Wednesday) and
steps (`*/2`: sun, tue, thu, sat) come out as plain lists.
"""

from __future__ import annotations

from functools import cache
from typing import Literal

from apscheduler.triggers.cron import CronTrigger

DstRepeated = Literal["first", "last", "both", "none"]
"""Which instants of a wall-clock time the autumn night repeats fire a slot."""
DstSkipped = Literal["shift", "skip"]
"""Whether a wall-clock time the spring night skips fires when the clocks jump, or not at all."""
DST_REPEATED: DstRepeated = "first"
DST_SKIPPED: DstSkipped = "shift"

DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
"""crontab's weekday numbers 0 to 6 (7 is Sunday too)."""


def crontab_weekdays(field: str) -> str:
    """The weekday field with every numeric item as the names crontab means by it.

    Raises:
        ValueError: a number outside 0-7, or a malformed range or step.
    """
    return ",".join(_item(item) for item in field.split(","))


def _item(item: str) -> str:
    span, _, step_text = item.partition("/")
    if any(ch.isalpha() for ch in span) or not any(ch.isdigit() for ch in item):
        return item  # names (and `*`) mean the same days to APScheduler and crontab
    step = int(step_text) if step_text else 1
    if span == "*":
        first, last = 0, 6
    elif "-" in span:
        start, _, end = span.partition("-")
        first, last = _day(start), _day(end, upper=True)
    else:
        first = last = _day(span)
    if step < 1 or last < first:
        raise ValueError(f"weekday item {item!r} is not a valid crontab range")
    days = sorted({day % 7 for day in range(first, last + 1, step)})
    return ",".join(DAY_NAMES[day] for day in days)


def _day(text: str, upper: bool = False) -> int:
    if not text.isdigit() or int(text) > 7:
        raise ValueError(f"weekday {text!r} is not a crontab weekday (0-7, or a name)")
    day = int(text)
    return day if upper or day < 7 else 0


class WallClockCron(CronTrigger):  # type: ignore[misc]
    """APScheduler's cron trigger, carrying the level's daylight-saving rules.

    The rules travel with the trigger, so whatever walks a level's slots
    (`harness.scheduling.triggers.next_slot`, a `LevelSchedule`, a backfill) applies them
    without being told.
    """

    __slots__ = ("repeated", "skipped")

    repeated: DstRepeated
    skipped: DstSkipped


@cache
def crontab_trigger(
    expression: str,
    timezone: str,
    repeated: DstRepeated = DST_REPEATED,
    skipped: DstSkipped = DST_SKIPPED,
) -> WallClockCron:
    """APScheduler's trigger for a five-field crontab expression, weekdays as crontab's.

    Built once per expression, zone and rules, and shared: nothing changes a trigger once
    built, and a thousand levels on one schedule took their load 1,000 parses.

    Raises:
        ValueError: not five fields, or a field APScheduler or crontab refuses.
    """
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(f"{expression!r} is not a cron expression with 5 fields")
    fields[4] = crontab_weekdays(fields[4])
    trigger: WallClockCron = WallClockCron.from_crontab(" ".join(fields), timezone=timezone)
    trigger.repeated, trigger.skipped = repeated, skipped
    return trigger
