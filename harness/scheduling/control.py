"""Operator requests: pause, resume and cancel, the same whether the CLI or the HTTP API asks.

Each request is one append to the store, which every running service follows; nothing
here talks to a scheduler process, so a request works from any host that reaches the
store, and the ledger says who asked.
"""

from __future__ import annotations

import getpass
import socket
from dataclasses import dataclass

from harness.config import Settings
from harness.contracts.events import (
    CONTROL_STREAM,
    CancelRequested,
    LevelPaused,
    LevelResumed,
    level_stream,
)
from harness.projections.levels import level_paused
from harness.projections.ticks import TickInFlight, ticks_in_flight
from harness.store import EventStore


class UnknownLevelError(ValueError):
    """A request names a level the configuration does not have."""


@dataclass(frozen=True)
class Switched:
    """A level's state before and after a pause or resume request."""

    level: str
    was_paused: bool
    paused: bool


def operator() -> str:
    """Who asks, for the ledger, when the request comes from this machine's shell."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def switch_level(
    settings: Settings,
    store: EventStore,
    level: str,
    *,
    pause: bool,
    by: str,
    reason: str = "paused by operator",
) -> Switched:
    """Pause or resume a level: paused, its slots are recorded as skipped until resumed.

    Raises:
        UnknownLevelError: the level is not configured (nothing is appended).
    """
    if level not in settings.levels:
        known = ", ".join(settings.levels) or "none"
        raise UnknownLevelError(f"no level named {level!r} (known: {known})")
    was_paused = level_paused(store, level)
    event = (
        LevelPaused(level=level, reason=reason, by=by)
        if pause
        else LevelResumed(level=level, by=by)
    )
    store.append(level_stream(level), [event.to_record()])
    return Switched(level, was_paused, pause)


def request_cancel(store: EventStore, scope: str, by: str) -> list[TickInFlight]:
    """Ask every service to cancel the ticks in flight of a level or tick id prefix.

    Queued ticks never start and running ones are killed by the service that runs them.
    Returns the ticks in flight that match as the ticks read model has them (the caller
    brings it up to date first); the request is recorded even when none does, so a tick
    claimed a moment later by a service that has not folded it yet is still caught.
    """
    request = CancelRequested(scope=scope, by=by)
    matching = [t for t in ticks_in_flight(store) if request.matches(t.level, t.tick_id)]
    store.append(CONTROL_STREAM, [request.to_record()])
    return matching
