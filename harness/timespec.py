"""`--since` and `?since=`: a duration back from now or a time, read one way everywhere."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import overload

_AGO = re.compile(r"(\d+)([mhd])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: None) -> None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """A stored time with its zone: SQLite keeps none, and every time tickwork stores is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def parse_since(text: str) -> datetime:
    """`30m`, `12h`, `7d` ago, or an ISO date/time (naive means UTC).

    Raises:
        ValueError: with a message an operator can act on, for anything else.
    """
    match = _AGO.fullmatch(text.strip())
    if match:
        try:
            return datetime.now(UTC) - timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
        except OverflowError:
            raise ValueError(f"{text!r} reaches back before the year 1") from None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration like 30m, 12h, 7d nor an ISO date/time"
        ) from None
    return as_utc(parsed)
