"""A zone's next daylight-saving change, and what a level's schedule does in it.

`tickwork levels LEVEL` shows it, so an operator reads before the night comes which
slots a level fires when the clocks go back (the repeated hour, `dst_repeated`) or
forward (the skipped hour, `dst_skipped`), at which UTC instants. `zoneinfo` does not
list a zone's transitions: they are found by the offset changing, a day at a time, then
to the second.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

from harness.config import Scheduled
from harness.scheduling.triggers import ScheduleEnded, level_trigger, next_slot, offset_change

_DAY = timedelta(days=1)
HORIZON_DAYS = 400
"""How far ahead a transition is looked for: every zone that changes does so within it."""
SHOWN = 12
"""Slots listed for a transition at most (a minute schedule has 120 in the span)."""


@dataclass(frozen=True)
class Transition:
    """One change of a zone's UTC offset and the level's slots around it."""

    at: datetime
    """The instant the clocks change, in UTC."""
    kind: Literal["repeated", "skipped"]
    """`repeated`: the clocks go back, a wall-clock span happens twice; `skipped`: forward."""
    wall_from: datetime
    """The first wall-clock time of the span repeated or skipped (naive, the zone's)."""
    wall_to: datetime
    """The wall-clock time the span ends at."""
    rule: str
    """The level's rule for it: its `dst_repeated` or `dst_skipped`."""
    slots: list[datetime]
    """The level's slots (UTC) from one span before the change to one span after."""
    more: int
    """Slots in that span beyond those listed."""


@lru_cache(maxsize=64)
def next_transition(zone: ZoneInfo, after: datetime) -> tuple[datetime, timedelta] | None:
    """The next offset change after `after` and how far the clocks move (None: none ahead).

    Cached: the levels `tickwork levels` describes at one `now` share a few zones.
    """
    start = int(after.timestamp())
    offset = datetime.fromtimestamp(start, zone).utcoffset()
    step = int(_DAY.total_seconds())
    for day in range(1, HORIZON_DAYS + 1):
        probe = start + day * step
        moved = datetime.fromtimestamp(probe, zone).utcoffset()
        if moved != offset and moved is not None and offset is not None:
            return offset_change(zone, probe - step, probe), moved - offset
    return None


def level_transition(config: Scheduled, now: datetime) -> Transition | None:
    """What a schedule does at its zone's next transition (None: no transition ahead)."""
    zone = ZoneInfo(config.timezone)
    found = next_transition(zone, now)
    if found is None:
        return None
    at, shift = found
    span = abs(shift)
    repeated, skipped = config.dst_rules()
    trigger = level_trigger(config)
    slots: list[datetime] = []
    try:
        slot = next_slot(trigger, None, at - span)
        while slot < at + span:
            slots.append(slot)
            slot = next_slot(trigger, slot, slot)
    except ScheduleEnded:
        pass
    after_wall = at.astimezone(zone).replace(tzinfo=None, fold=0)
    before_wall = after_wall - shift
    return Transition(
        at=at,
        kind="repeated" if shift < timedelta(0) else "skipped",
        wall_from=min(after_wall, before_wall),
        wall_to=max(after_wall, before_wall),
        rule=repeated if shift < timedelta(0) else skipped,
        slots=slots[:SHOWN],
        more=max(0, len(slots) - SHOWN),
    )
