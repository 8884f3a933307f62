"""Rate-limit buckets in the store, shared by every process and host that uses it.

Each bucket (a target's, a provider host's, a level's) is a row, locked while a call
takes its share: on PostgreSQL with `SELECT … FOR UPDATE` (rows locked in key order, so
two callers never deadlock), on SQLite by the write lock `BEGIN IMMEDIATE` takes (one
host). What was taken is kept beside it:

- `rpm` and `tpm` as a sliding window of grants, one row per call and kind, each counting
  for 60 seconds after it was taken: a bucket never lets more than its limit through in
  any minute, and a call that does not fit is told exactly when it will (the moment
  enough of the oldest grants age out). A `tpm` grant holds the call's estimate until
  `settle` replaces it with the usage the answer reported.
- `max_parallel` as leases, one per call in flight, released by `settle`. A lease whose
  holder died is reclaimed: at once when its process is gone from the host the taker runs
  on, else when it expires (the call's timeout and then some).
- A provider's 429 with `retry-after` blocks the bucket until then (`block`), for every
  caller.

Times are epoch seconds of each caller's clock: hosts sharing a store keep theirs in sync
(NTP), a few milliseconds of skew against windows of a minute.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from harness.contracts.rate_limits import Scope
from harness.store.base import EventStore
from harness.store.schema import metadata
from harness.store.sql import upsert

WINDOW_SECONDS = 60.0
"""What `rpm` and `tpm` count over: any minute."""
PARALLEL_POLL_SECONDS = 0.05
"""How soon a caller waiting for a parallel slot asks again: a release cannot be foreseen."""

rate_buckets = sa.Table(
    "rate_buckets",
    metadata,
    sa.Column("key", sa.String(300), primary_key=True),
    sa.Column("blocked_until", sa.Float(), nullable=False),
)
"""Migration 0019. One row per bucket ever used: the row callers lock, and how long a
provider's 429 holds every call of it back."""

rate_grants = sa.Table(
    "rate_grants",
    metadata,
    sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
    sa.Column("bucket", sa.String(300), nullable=False),
    sa.Column("kind", sa.String(3), nullable=False),
    sa.Column("call_id", sa.String(255), nullable=False),
    sa.Column("at", sa.Float(), nullable=False),
    sa.Column("amount", sa.BigInteger(), nullable=False),
    sa.Index("ix_rate_grants_bucket_at", "bucket", "at"),
    sa.Index("ix_rate_grants_call_id", "call_id"),
)
"""The last minute's grants (`rpm`: 1 a call, `tpm`: its tokens); older ones are deleted by
the next caller of their bucket."""

rate_leases = sa.Table(
    "rate_leases",
    metadata,
    sa.Column("call_id", sa.String(255), primary_key=True),
    sa.Column("bucket", sa.String(300), primary_key=True),
    sa.Column("tick_id", sa.String(255)),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("expires_at", sa.Float(), nullable=False),
    sa.Index("ix_rate_leases_bucket", "bucket"),
    sa.Index("ix_rate_leases_tick_id", "tick_id"),
)
"""The calls in flight of buckets with `max_parallel`."""

Clock = Callable[[], float]


@dataclass(frozen=True)
class Call:
    """One model call asking for its turn."""

    call_id: str
    """Unique per call (a tick's id and call number): its grants and lease are found by it."""
    tokens: int
    """The call's tokens as estimated before it is sent (corrected by `settle`)."""
    lease_seconds: float
    tick_id: str | None = None


@dataclass(frozen=True)
class Turn:
    """The answer to a call asking: taken now (`wait` 0), or how long until it may be."""

    wait: float
    """Seconds until the call may ask again with a chance (0: taken, go)."""
    bucket: str | None = None
    """The bucket that holds it back (the one with the longest wait)."""
    reason: str | None = None
    """`rpm`, `tpm`, `max_parallel` or `retry_after`."""


TAKEN = Turn(0.0)


def take(store: EventStore, scopes: Sequence[Scope], call: Call, clock: Clock = time.time) -> Turn:
    """Take the call's share from every bucket in scope, all or none, in one transaction.

    Raises:
        StoreError: the store cannot be reached or written.
    """
    if not scopes:
        return TAKEN
    keys = [key for key, _ in scopes]
    with store.write_transaction() as conn:
        now = clock()
        blocked = _locked(conn, keys)
        turn = max(
            (Turn(until - now, key, "retry_after") for key, until in blocked.items()),
            key=lambda turn: turn.wait,
            default=TAKEN,
        )
        windowed = [(key, limit) for key, limit in scopes if limit.rpm or limit.tpm]
        if windowed:
            conn.execute(
                rate_grants.delete().where(
                    rate_grants.c.bucket.in_([key for key, _ in windowed]),
                    rate_grants.c.at <= now - WINDOW_SECONDS,
                )
            )
            turn = max(turn, _window_turn(conn, windowed, call, now), key=lambda t: t.wait)
        parallel = [(key, limit) for key, limit in scopes if limit.max_parallel]
        if parallel:
            turn = max(turn, _parallel_turn(conn, parallel, now), key=lambda t: t.wait)
        if turn.wait > 0:
            return turn
        _grant(conn, scopes, call, now)
    return TAKEN


def settle(store: EventStore, call_id: str, tokens: int | None) -> None:
    """The call ended: its `tpm` grants count its real `tokens` (if known), its lease ends.

    Raises:
        StoreError: the store cannot be reached or written.
    """
    with store.write_transaction() as conn:
        if tokens is not None:
            conn.execute(
                rate_grants.update()
                .where(rate_grants.c.call_id == call_id, rate_grants.c.kind == "tpm")
                .values(amount=tokens)
            )
        conn.execute(rate_leases.delete().where(rate_leases.c.call_id == call_id))


def release_tick(store: EventStore, tick_id: str) -> int:
    """Free the parallel slots a tick still holds (it ended, maybe killed); returns how many."""
    with store.write_transaction() as conn:
        return conn.execute(rate_leases.delete().where(rate_leases.c.tick_id == tick_id)).rowcount


def block(store: EventStore, keys: Sequence[str], until: float) -> None:
    """Hold every call of these buckets back until `until` (a provider's `retry-after`)."""
    if not keys:
        return
    with store.write_transaction() as conn:
        insert = upsert(conn, rate_buckets)
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=["key"],
                set_={
                    "blocked_until": sa.func.max(
                        rate_buckets.c.blocked_until, insert.excluded.blocked_until
                    )
                    if conn.dialect.name == "sqlite"
                    else sa.func.greatest(
                        rate_buckets.c.blocked_until, insert.excluded.blocked_until
                    )
                },
            ),
            [{"key": key, "blocked_until": until} for key in keys],
        )


def _locked(conn: sa.Connection, keys: list[str]) -> dict[str, float]:
    """Lock the buckets' rows (created on first use); their `blocked_until`, by key."""
    query = sa.select(rate_buckets.c.key, rate_buckets.c.blocked_until).where(
        rate_buckets.c.key.in_(keys)
    )
    if conn.dialect.name == "postgresql":
        query = query.order_by(rate_buckets.c.key).with_for_update()
    found = dict(conn.execute(query).all())
    missing = [key for key in keys if key not in found]
    if missing:
        insert = upsert(conn, rate_buckets).on_conflict_do_nothing(index_elements=["key"])
        conn.execute(insert, [{"key": key, "blocked_until": 0.0} for key in missing])
        found.update(conn.execute(query.where(rate_buckets.c.key.in_(missing))).all())
    return found


def _window_turn(conn: sa.Connection, scopes: list[Scope], call: Call, now: float) -> Turn:
    """The longest wait any bucket's last minute of grants imposes on the call (0: fits)."""
    used = sa.select(rate_grants.c.bucket, rate_grants.c.kind, sa.func.sum(rate_grants.c.amount))
    used = used.where(rate_grants.c.bucket.in_([key for key, _ in scopes])).group_by(
        rate_grants.c.bucket, rate_grants.c.kind
    )
    sums = {(bucket, kind): int(total) for bucket, kind, total in conn.execute(used)}
    turn = TAKEN
    for key, limit in scopes:
        for kind, cap, need in (("rpm", limit.rpm, 1), ("tpm", limit.tpm, call.tokens)):
            if cap is None:
                continue
            need = min(need, cap)  # a call larger than a minute's tokens takes a whole minute
            excess = sums.get((key, kind), 0) + need - cap
            if excess > 0:
                wait = _aged_out(conn, key, kind, excess) - now
                if wait > turn.wait:
                    turn = Turn(wait, key, kind)
    return turn


def _aged_out(conn: sa.Connection, key: str, kind: str, excess: int) -> float:
    """When the oldest grants worth `excess` will have left the window."""
    oldest = (
        sa.select(rate_grants.c.at, rate_grants.c.amount)
        .where(rate_grants.c.bucket == key, rate_grants.c.kind == kind)
        .order_by(rate_grants.c.at)
    )
    released = 0
    for at, amount in conn.execute(oldest):
        released += int(amount)
        if released >= excess:
            return float(at) + WINDOW_SECONDS
    return 0.0  # grants settled lower since the sums were read: ask again now


def _parallel_turn(conn: sa.Connection, scopes: list[Scope], now: float) -> Turn:
    """Whether every bucket has a slot free, after reclaiming the slots of dead holders."""
    keys = [key for key, _ in scopes]
    conn.execute(
        rate_leases.delete().where(rate_leases.c.bucket.in_(keys), rate_leases.c.expires_at <= now)
    )
    held = sa.select(
        rate_leases.c.bucket, rate_leases.c.call_id, rate_leases.c.host, rate_leases.c.pid
    )
    holders: dict[str, list[tuple[str, str, int]]] = {key: [] for key in keys}
    for bucket, call_id, host, pid in conn.execute(held.where(rate_leases.c.bucket.in_(keys))):
        holders[bucket].append((call_id, host, pid))
    for key, limit in scopes:
        assert limit.max_parallel is not None
        if len(holders[key]) < limit.max_parallel:
            continue
        dead = [call_id for call_id, host, pid in holders[key] if _gone(host, pid)]
        if dead:
            conn.execute(rate_leases.delete().where(rate_leases.c.call_id.in_(dead)))
        if len(holders[key]) - len(dead) >= limit.max_parallel:
            return Turn(PARALLEL_POLL_SECONDS, key, "max_parallel")
    return TAKEN


HOST = socket.gethostname()


def _gone(host: str, pid: int) -> bool:
    """Whether a lease's holder is known dead: a process of this host that no longer runs."""
    if host != HOST:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _grant(conn: sa.Connection, scopes: Sequence[Scope], call: Call, now: float) -> None:
    grants = [
        {"bucket": key, "kind": kind, "call_id": call.call_id, "at": now, "amount": amount}
        for key, limit in scopes
        for kind, cap, amount in (("rpm", limit.rpm, 1), ("tpm", limit.tpm, call.tokens))
        if cap is not None
    ]
    if grants:
        conn.execute(rate_grants.insert(), grants)
    leases = [
        {
            "call_id": call.call_id,
            "bucket": key,
            "tick_id": call.tick_id,
            "host": HOST,
            "pid": os.getpid(),
            "expires_at": now + call.lease_seconds,
        }
        for key, limit in scopes
        if limit.max_parallel
    ]
    if leases:
        conn.execute(rate_leases.insert(), leases)
