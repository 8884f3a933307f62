"""Which levels are paused and which cancel scopes are in force, whoever decided them.

Not tables but queries every stage after the projections needs (the scheduler before
each wave, the executor at every step of a tick's life, the digests, the operator's
controls), so they live here, on the store API.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.contracts.events import (
    CONTROL_STREAM,
    CancelCleared,
    CancelRequested,
    LevelPaused,
    OneShotCancelRequested,
    decode,
    level_stream,
)
from harness.store import EventStore


def pauses(store: EventStore, levels: Iterable[str]) -> dict[str, LevelPaused]:
    """The pause in force of each paused level of `levels` (who decided it, and why).

    One read for any number of levels: a scheduler asks this for every slot of a wave.
    """
    names = {level_stream(level): level for level in levels}
    switches = store.read_streams(names, types=("LevelPaused", "LevelResumed"))
    in_force = {}
    for stream, history in switches.items():
        switch = decode(history[-1]) if history else None
        if isinstance(switch, LevelPaused):
            in_force[names[stream]] = switch
    return in_force


def paused_levels(store: EventStore, levels: Iterable[str]) -> set[str]:
    """Levels paused (fail-closed after infrastructure failures, or by an operator)."""
    return set(pauses(store, levels))


def level_paused(store: EventStore, level: str) -> bool:
    """Whether one level is paused, for callers that ask about a single level."""
    return level in paused_levels(store, [level])


def cancel_scopes(store: EventStore) -> list[CancelRequested]:
    """Cancel requests in force: recorded and not cleared since, oldest first.

    One per scope (the latest request for it): a scope cancelled twice is cleared once.
    """
    types = ("CancelRequested", "CancelCleared")
    history = store.read_streams([CONTROL_STREAM], types=types).get(CONTROL_STREAM, [])
    in_force: dict[str, CancelRequested] = {}
    for stored in history:
        request = decode(stored)
        if isinstance(request, OneShotCancelRequested):
            continue
        if isinstance(request, CancelRequested):
            in_force.pop(request.scope, None)
            in_force[request.scope] = request
        elif isinstance(request, CancelCleared):
            in_force.pop(request.scope, None)
    return list(in_force.values())
