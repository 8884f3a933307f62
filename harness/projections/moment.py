"""What a tick in flight is doing at this moment, folded from its stream.

A running tick's counters say `0 model call(s)` while its first call is out: a call is
counted when it ends. Its stream says more: a `ModelCallStarted` without its
`ModelCalled` is the call in flight (model, since when), the attempt's `TickStarted`
gives its deadline (start plus `timeout_seconds`), and a `TickAttemptFailed` with no
start after it is a backoff whose next attempt is due `retry_in_seconds` after it. The
CLI (`tickwork show`) and the tick page say it in the same words (`TickNow.words`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from harness.contracts import (
    TERMINAL_TYPES,
    ModelCalled,
    ModelCallStarted,
    TickAttemptFailed,
    TickBuffered,
    TickScheduled,
    TickStarted,
)

Doing = Literal["queued", "buffered", "calling", "running", "backing_off"]


class Recorded(Protocol):
    """An event as the store or the API holds it: its type and its data."""

    @property
    def type(self) -> str:
        """The event's type name."""
        ...

    @property
    def data(self) -> Mapping[str, Any]:
        """Its fields, `occurred_at` among them."""
        ...


class TickNow(BaseModel):
    """Where a tick in flight stands: waiting, in a model call, running, or between attempts."""

    model_config = ConfigDict(defer_build=True)

    doing: Doing
    since: datetime
    """When it began doing it: its claim, the attempt's start, the call's start or the last
    call's end (running with none in flight), the failure."""
    attempt: int
    """The tick's attempt this is (for `backing_off`: the one due next)."""
    call: int | None = None
    """The call in flight's number in its attempt's worker, from 1 (`calling` only)."""
    model: str | None = None
    retry_of_call: int = 0
    """How many tries of the same turn the upstream refused before this one (the SDK's
    retries inside the worker: `ModelCalled.attempt`)."""
    deadline: datetime | None = None
    """When the running attempt is stopped (its start plus the tick's timeout)."""
    retry_at: datetime | None = None
    """When the next attempt is due (`backing_off` only)."""
    failed: str | None = None
    """How the attempt before a backoff ended: `failure class: reason`."""

    def words(self, now: datetime | None = None) -> str:
        """One line for people, its times in UTC; with `now`, also how long ago or ahead.

        A page that stays open without `now` does not go stale: its times are absolute.
        """

        def since() -> str:
            return f"since {_clock(self.since)}" + _ago(self.since, now)

        if self.doing == "backing_off":
            assert self.retry_at is not None
            return (
                f"attempt {self.attempt - 1} failed ({self.failed}); attempt {self.attempt} "
                f"at {_clock(self.retry_at)}" + _ago(self.retry_at, now)
            )
        if self.doing in ("queued", "buffered"):
            why = "behind its level's ticks" if self.doing == "buffered" else "for a place"
            return f"attempt {self.attempt} waiting {why} {since()}"
        if self.doing == "calling":
            retry = f", retry {self.retry_of_call} of a refused try" if self.retry_of_call else ""
            what = f"model call {self.call} to {self.model}{retry} in flight"
        else:
            what = "running, no model call in flight"
        line = f"attempt {self.attempt}: {what} {since()}"
        if self.deadline is not None:
            line += f"; deadline {_clock(self.deadline)}" + _ago(self.deadline, now)
        return line


def tick_now(events: Iterable[Recorded]) -> TickNow | None:
    """Where the tick the events tell of stands now; None once it has ended (or never began)."""
    now: TickNow | None = None
    answered_try = 0
    for event in events:
        data, kind = event.data, event.type
        at = datetime.fromisoformat(data["occurred_at"]) if "occurred_at" in data else None
        if kind in TERMINAL_TYPES:
            return None
        if at is None:
            continue
        if kind == TickScheduled.type:
            now = TickNow(doing="queued", since=at, attempt=data.get("attempt", 1))
        elif kind == TickBuffered.type and now is not None:
            now = now.model_copy(update={"doing": "buffered"})
        elif kind == TickStarted.type:
            timeout = data.get("timeout_seconds")
            deadline = None if timeout is None else at + timedelta(seconds=timeout)
            attempt = data.get("attempt", 1)
            now = TickNow(doing="running", since=at, attempt=attempt, deadline=deadline)
            answered_try = 0
        elif now is None:
            continue
        elif kind == ModelCallStarted.type:
            update = {"doing": "calling", "since": at, "call": data["call"]}
            update.update(model=data["model"], retry_of_call=answered_try)
            now = now.model_copy(update=update)
        elif kind == ModelCalled.type and now.call == data.get("call"):
            refused = data.get("error_class") is not None
            answered_try = data.get("attempt", 1) if refused else 0
            update = {"doing": "running", "since": at, "call": None, "model": None}
            now = now.model_copy(update=update)
        elif kind == TickAttemptFailed.type:
            retry_at = at + timedelta(seconds=data["retry_in_seconds"])
            failed = f"{data['failure_class']}: {data['reason']}"
            now = TickNow(
                doing="backing_off",
                since=at,
                attempt=data["attempt"] + 1,
                retry_at=retry_at,
                failed=failed,
            )
    return now


def _clock(at: datetime) -> str:
    return f"{at.astimezone(UTC):%H:%M:%S} UTC"


def _span(elapsed: timedelta) -> str:
    seconds = max(elapsed.total_seconds(), 0.0)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes} min {seconds:02d} s"


def _ago(at: datetime, now: datetime | None) -> str:
    """` (12.0 s ago)` or ` (in 48.0 s)`; nothing without `now`."""
    if now is None:
        return ""
    if at > now:
        return f" (in {_span(at - now)})"
    return f" ({_span(now - at)} ago)"
