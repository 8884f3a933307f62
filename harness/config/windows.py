"""When a level may fire at all: its jitter, its window, its exclusions and its run limit.

The keys of `[levels.<name>]` an operator who knows Temporal Schedules expects beside the
cron or interval spec (`jitter`, `start_at`, `end_at`, `exclude`, `max_runs`), and the
global `[scheduling] jitter`. Kept apart from `settings` because they describe the shape of
a schedule, not what a tick does; the scheduler reads them through `harness.scheduling`.
Times without a zone are read in the level's `timezone`.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta
from typing import Annotated
from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from harness.config.crontab import (
    DST_REPEATED,
    DST_SKIPPED,
    DstRepeated,
    DstSkipped,
    crontab_trigger,
)

_NO_JITTER = re.compile(r"^\s*0\s*[smhd]?\s*$")


def jitter_seconds(text: str | None) -> float:
    """Seconds of a jitter such as `30s` (`0s` or unset: none)."""
    from harness.config.settings import parse_interval  # settings imports this module

    if text is None or _NO_JITTER.match(text):
        return 0.0
    return float(parse_interval(text))


def _jitter(text: str | None) -> str | None:
    jitter_seconds(text)
    return text


Jitter = Annotated[str | None, AfterValidator(_jitter)]
"""A duration like `30s`, `5m` (`0s`: none)."""


def _date_text(value: object) -> object:
    """`2026-12-25` written as text (an environment variable) is a date, as in TOML."""
    if isinstance(value, str) and len(value.strip()) == len("2026-12-25"):
        try:
            return date.fromisoformat(value.strip())
        except ValueError:
            return value
    return value


Bound = Annotated[datetime | date | None, BeforeValidator(_date_text)]
"""A TOML time or date; a date stands for its whole day."""


class SchedulingConfig(BaseModel):
    """`[scheduling]`: defaults every level's schedule takes unless it sets its own."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    jitter: Jitter = None
    """Each slot fires a deterministic delay in [0, jitter) after its time, derived from
    level and slot (every replica agrees): 1,000 levels on `* * * * *` spread over the
    minute instead of hitting the provider in the same second. A level's `jitter` wins."""
    dst_repeated: DstRepeated = DST_REPEATED
    """The autumn's repeated wall-clock times, for levels and digests that do not say
    (`first`, `last`, `both`, `none`: `Scheduled.dst_repeated`)."""
    dst_skipped: DstSkipped = DST_SKIPPED
    """The spring's skipped wall-clock times, for levels and digests that do not say
    (`shift`, `skip`: `Scheduled.dst_skipped`)."""


class Exclusion:
    """One `exclude` entry: a date (`2026-12-25`) or a five-field cron expression.

    Matched against the wall-clock time a slot fires at in the level's zone: a date
    excludes every slot of that local day, a cron expression every slot whose local minute
    it names (both instants of a time the autumn night repeats; a slot the spring night
    moves to the jump is matched at the time it fires).
    """

    def __init__(self, text: str) -> None:
        """Raises ValueError, naming the entry, when it is neither a date nor a cron."""
        self.text = text
        self.day: date | None = None
        self.cron: CronTrigger | None = None
        if len(text.split()) == 5:
            try:
                self.cron = crontab_trigger(text, timezone="UTC")
            except ValueError as exc:
                raise ValueError(f"{text!r} is not a valid cron expression: {exc}") from None
            return
        try:
            self.day = date.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(
                f"{text!r} is neither a date (2026-12-25) nor a cron expression with 5 fields"
            ) from None

    def matches(self, local: datetime) -> bool:
        """Whether the wall-clock time `local` (in the level's zone) is excluded."""
        if self.day is not None:
            return local.date() == self.day
        assert self.cron is not None
        wall = local.replace(tzinfo=None, second=0, microsecond=0, fold=0)
        return all(
            field.get_next_value(wall) == field.get_value(wall)
            for field in self.cron.fields
            if field.name != "second"
        )


class ScheduleLimits(BaseModel):
    """The window, exclusions, run limit and jitter of a level's schedule (a mix-in)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    jitter: Jitter = None
    """Delay each slot by a deterministic amount in [0, jitter) (`0s`: none); default
    `[scheduling] jitter`. The slot (its tick id, its claim) stays the un-jittered time."""
    start_at: Bound = None
    """No slot before this time (a date: its midnight), in the level's zone unless it has one."""
    end_at: Bound = None
    """No slot after this time (a date: through the end of that day)."""
    exclude: list[str] = []
    """Dates (`2026-12-25`) or cron expressions (`* * * * 6,0`) whose slots do not fire,
    read in the level's zone: holidays, maintenance nights."""
    max_runs: Annotated[int, Field(ge=1)] | None = None
    """Slots that may run, counted from the store (a restart does not reset it); slots
    after the last run are not fired. Ticks started by hand do not count."""

    @field_validator("exclude")
    @classmethod
    def _exclusions(cls, entries: list[str]) -> list[str]:
        for index, entry in enumerate(entries):
            try:
                Exclusion(entry)
            except ValueError as exc:
                raise ValueError(f"exclude[{index}]: {exc}") from None
        return entries

    @model_validator(mode="after")
    def _window(self) -> ScheduleLimits:
        zone = ZoneInfo("UTC")
        start, end = self.window_start(zone), self.window_end(zone)
        if start is not None and end is not None and end < start:
            raise ValueError("'end_at' is before 'start_at': the level would never fire")
        return self

    def exclusions(self) -> list[Exclusion]:
        """The `exclude` entries, parsed (they were checked when the file loaded)."""
        return [Exclusion(entry) for entry in self.exclude]

    def window_start(self, zone: ZoneInfo) -> datetime | None:
        """`start_at` as an instant (a time without a zone read in `zone`)."""
        return _instant(self.start_at, zone)

    def window_end(self, zone: ZoneInfo) -> datetime | None:
        """`end_at` as an instant; a date stands for the last instant of that day."""
        if isinstance(self.end_at, date) and not isinstance(self.end_at, datetime):
            following = _instant(self.end_at + timedelta(days=1), zone)
            assert following is not None
            return following - timedelta(microseconds=1)
        return _instant(self.end_at, zone)


def _instant(value: datetime | date | None, zone: ZoneInfo) -> datetime | None:
    """A configured time as an aware datetime: naive ones are wall-clock times in `zone`.

    A wall-clock time the autumn night repeats means its first instant; one the spring
    night skips, the instant as far after the jump as it lies after the last valid time
    (PEP 495), so 02:30 on a night that jumps from 02:00 to 03:00 is 03:30.
    """
    if value is None:
        return None
    if not isinstance(value, datetime):
        value = datetime.combine(value, time())
    return value if value.tzinfo is not None else value.replace(tzinfo=zone)
