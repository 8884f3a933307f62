"""Operator requests: pause, resume and cancel, the same whether the CLI or the HTTP API asks.

Each request is one append to the store, which every running service follows; nothing
here talks to a scheduler process, so a request works from any host that reaches the
store, and the ledger says who asked. Every process that owns ticks (`tickwork run`, and
`tickwork tick` for its own) follows the control stream with a `ControlFollower`.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Callable
from dataclasses import dataclass

from harness.config import Settings
from harness.contracts.events import (
    CONTROL_STREAM,
    CancelCleared,
    CancelRequested,
    LevelPaused,
    LevelResumed,
    decode,
    level_stream,
)
from harness.projections.levels import cancel_scopes, level_paused
from harness.projections.ticks import TickInFlight, ticks_in_flight
from harness.scheduling.handoff import Handoff
from harness.store import SqlEventStore, StoreError


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
    store: SqlEventStore,
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


def request_cancel(store: SqlEventStore, scope: str, by: str) -> list[TickInFlight]:
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


def clear_cancel(store: SqlEventStore, scope: str, by: str) -> bool:
    """End a cancel scope: ticks it covered may start again. False if it was not in force.

    Nothing is appended for a scope that is not in force.
    """
    if not any(request.scope == scope for request in cancel_scopes(store)):
        return False
    store.append(CONTROL_STREAM, [CancelCleared(scope=scope, by=by).to_record()])
    return True


class ControlFollower:
    """Hands the cancel requests appended since it last looked to the ticks' owner.

    Requests recorded before it started are not replayed: the scopes among them still in
    force stop their ticks at the next step of their life (`harness.execution.lifecycle`).
    """

    def __init__(self, store: SqlEventStore, owner: Handoff, report: Callable[[str], None]) -> None:
        self.store = store
        self.owner = owner
        self.report = report
        self.position = store.stream_version(CONTROL_STREAM)

    def poll(self) -> list[CancelRequested]:
        """Act on the new requests; returns them. A store that cannot be read is reported."""
        try:
            requests = self.store.read_stream(CONTROL_STREAM, after=self.position)
        except StoreError as exc:
            self.report(f"control stream unreadable: {exc}")
            return []
        acted = []
        for stored in requests:
            self.position = stored.stream_position
            request = decode(stored)
            if isinstance(request, CancelRequested):
                self.owner.cancel(request.matches, request.reason)
                acted.append(request)
        return acted
