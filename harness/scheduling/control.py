"""Operator requests: pause, resume and cancel, the same whether the CLI or the HTTP API asks.

Each request is one append to the store, which every running service follows; nothing
here talks to a scheduler process, so a request works from any host that reaches the
store, and the ledger says who asked. Every process that owns ticks (`tickwork run`, and
`tickwork tick` for its own) follows the control stream with a `ControlFollower`.
"""

from __future__ import annotations

import getpass
import socket
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from uuid import UUID

from harness.config import LevelConfig, Settings
from harness.contracts import (
    CONTROL_STREAM,
    CancelCleared,
    CancelRequested,
    LevelPaused,
    LevelResumed,
    decode,
    level_stream,
)
from harness.projections import (
    TickInFlight,
    cancel_scopes,
    level_paused,
    pauses,
    tick_ids_starting,
    ticks_in_flight,
)
from harness.scheduling.handoff import TickOwner
from harness.store import EventStore

PAUSED = "paused"
"""Why a tick of a paused level ends cancelled."""


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
    note: str | None = None,
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
        LevelPaused(level=level, reason=reason, by=by, note=note)
        if pause
        else LevelResumed(level=level, by=by)
    )
    store.append(level_stream(level), [event.to_record()])
    return Switched(level, was_paused, pause)


class ScopeError(ValueError):
    """A cancel scope that names no level and no tick in flight: nothing was recorded."""


def cancel(
    store: EventStore, scope: str, by: str, levels: Collection[str], force: bool = False
) -> tuple[list[str], list[TickInFlight]]:
    """Cancel a level, or the ticks in flight whose id starts with `scope`.

    A level's scope lasts until cleared. Any other scope stands for the ticks in flight it
    matches now, each recorded as a scope of its full id that ends with its tick: a short
    prefix (`m`) would otherwise cancel every `min` tick to come. A scope matching
    neither is refused, unless `force` records it as given, lasting, for ticks to come.
    Returns the scopes recorded and the ticks in flight they match (read model brought
    up to date by the caller).

    Raises:
        ScopeError: the scope matches no level and no tick in flight (nothing recorded).
    """
    scopes = [scope] if force or scope in levels else _ticks_named(store, scope, levels)
    matching: dict[str, TickInFlight] = {}
    for each in scopes:
        matching.update((tick.tick_id, tick) for tick in request_cancel(store, each, by))
    return scopes, list(matching.values())


def _ticks_named(store: EventStore, prefix: str, levels: Collection[str]) -> list[str]:
    """Ids of the ticks in flight that start with `prefix`; refused when there are none."""
    flying = sorted(t.tick_id for t in ticks_in_flight(store) if t.tick_id.startswith(prefix))
    if flying:
        return flying
    ended = tick_ids_starting(store, prefix, 1)
    if ended:
        raise ScopeError(
            f"no tick in flight starts with {prefix!r} ({ended[0]} has ended): nothing to cancel"
        )
    known = ", ".join(levels) or "none"
    raise ScopeError(
        f"{prefix!r} is no level (known: {known}) and no tick id starts with it: nothing "
        "recorded (--force records it anyway, to cancel ticks that start later)"
    )


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


def clear_cancel(store: EventStore, scope: str, by: str) -> bool:
    """End a cancel scope: ticks it covered may start again. False if it was not in force.

    Nothing is appended for a scope that is not in force.
    """
    if not any(request.scope == scope for request in cancel_scopes(store)):
        return False
    store.append(CONTROL_STREAM, [CancelCleared(scope=scope, by=by).to_record()])
    return True


class ControlFollower:
    """Hands the ticks' owner the cancel requests and level pauses recorded since it looked.

    A pause withdraws the level's queued ticks at once and, with `on_pause = "stop"` (or
    unset, for a pause tickwork decided), stops its running ones. Requests recorded
    before it started are not replayed: the scopes among them still in force, like the
    pauses, stop their ticks at the next step of their life (`harness.execution.lifecycle`).
    """

    def __init__(
        self, store: EventStore, owner: TickOwner, levels: Mapping[str, LevelConfig]
    ) -> None:
        self.store = store
        self.owner = owner
        self.levels = levels
        self.position = store.stream_version(CONTROL_STREAM)
        self.pauses_seen: set[UUID] = {p.event_id for p in pauses(store, levels).values()}

    def poll(self) -> list[CancelRequested]:
        """Act on new requests and pauses; returns the requests.

        Raises:
            StoreError: the store cannot be read; nothing was acted on, the next poll asks
                again from the same place.
        """
        requests = self.store.read_stream(CONTROL_STREAM, after=self.position)
        in_force = pauses(self.store, self.levels)
        for level, pause in in_force.items():
            if pause.event_id not in self.pauses_seen:
                self.pauses_seen.add(pause.event_id)
                self._paused(level, pause)
        acted = []
        for stored in requests:
            self.position = stored.stream_position
            request = decode(stored)
            if isinstance(request, CancelRequested):
                self.owner.cancel(request.matches, request.reason)
                acted.append(request)
        return acted

    def _paused(self, level: str, pause: LevelPaused) -> None:
        on_pause = self.levels[level].on_pause or ("stop" if pause.by == "tickwork" else None)
        self.owner.cancel(lambda of, _: of == level, PAUSED, running=on_pause == "stop")
