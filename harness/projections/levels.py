"""Which levels are paused and which cancel scopes are in force, whoever decided them.

Queries every stage after the projections needs (the scheduler before each wave, the
executor at every step of a tick's life, the digests, the operator's controls), so they
live here. Pauses are read from the level streams; cancel scopes from a small read model
(`CancelScopesProjection`) plus the control stream's events it has not folded yet.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from harness.contracts import (
    CONTROL_STREAM,
    CancelCleared,
    CancelRequested,
    LevelPaused,
    LevelResumed,
    OneShotCancelRequested,
    decode,
    level_stream,
)
from harness.projections.base import EventData, Projection, upsert
from harness.projections.ticks import OPEN, ticks
from harness.store import EventStore, metadata

cancel_scopes_folded = sa.Table(
    "cancel_scopes",
    metadata,
    sa.Column("scope", sa.String(200), primary_key=True),
    sa.Column("stream_position", sa.Integer(), nullable=False),
    sa.Column("in_force", sa.Boolean(), nullable=False),
)
"""Each scope ever named, with the control stream position of its last request or clear."""


def pauses(store: EventStore, levels: Iterable[str]) -> dict[str, LevelPaused]:
    """The pause in force of each paused level of `levels` (who decided it, and why).

    One read for any number of levels: a scheduler asks this for every slot of a wave.
    """
    names = {level_stream(level): level for level in levels}
    switches = store.read_streams(names, types=(LevelPaused.type, LevelResumed.type))
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


class CancelScopesProjection(Projection):
    """Where in the control stream each scope was last requested or cleared.

    Every `CancelRequested` and `CancelCleared` is appended to the control stream and
    nothing else is, so the events folded, counted, are that stream's positions: the
    read model names the event that put each scope in force, and how far it has read.
    """

    name = "cancel_scopes"
    types = frozenset({CancelRequested.type, CancelCleared.type})
    tables = (cancel_scopes_folded,)

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """Each scope's last event of the batch, at the position the count gives it."""
        at = conn.execute(sa.select(sa.func.max(cancel_scopes_folded.c.stream_position)))
        position = at.scalar() or 0
        last: dict[str, dict[str, object]] = {}
        for _, type_, data in batch:
            position += 1
            last.pop(data["scope"], None)
            last[data["scope"]] = {
                "scope": data["scope"],
                "stream_position": position,
                "in_force": type_ == CancelRequested.type,
            }
        if not last:
            return
        insert = upsert(conn, cancel_scopes_folded)
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=["scope"],
                set_={
                    "stream_position": insert.excluded.stream_position,
                    "in_force": insert.excluded.in_force,
                },
            ),
            list(last.values()),
        )


def cancel_scopes(store: EventStore) -> list[CancelRequested]:
    """Cancel requests in force: recorded and not cleared since, oldest first.

    One per scope (the latest request for it): a scope cancelled twice is cleared once.
    Read from the requests the read model names and the control stream's events past it,
    so the answer is current whether or not a projector has folded the newest ones: a
    few indexed reads, however long the stream (the executor asks at every step of every
    tick).
    """
    with store.read_transaction() as conn:
        rows = conn.execute(
            sa.select(cancel_scopes_folded.c.stream_position, cancel_scopes_folded.c.in_force)
        ).all()
    folded = max((position for position, _ in rows), default=0)
    history = [
        event
        for position, in_force in sorted(rows)
        if in_force
        for event in store.read_stream(CONTROL_STREAM, after=position - 1, limit=1)
    ]
    history += store.read_stream(CONTROL_STREAM, after=folded)
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
    for tick_id in _ended_ticks(store, list(in_force)):
        del in_force[tick_id]
    return list(in_force.values())


def _ended_ticks(store: EventStore, scopes: list[str]) -> list[str]:
    """The scopes that are the ids of ended ticks: a tick's scope ends with its tick.

    A lookup of the few scopes in force by the ticks' primary key.
    """
    if not scopes:
        return []
    query = sa.select(ticks.c.tick_id).where(
        ticks.c.tick_id.in_(scopes), ticks.c.status.not_in(OPEN)
    )
    with store.read_transaction() as conn:
        return list(conn.execute(query).scalars())
