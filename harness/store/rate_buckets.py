"""Rate-limit buckets in the store, shared by every process and host that uses it.

Each bucket (a target's, a provider host's, a level's) is a row, locked while a call
takes its share: on PostgreSQL with `SELECT … FOR UPDATE` (rows locked in key order, so
two callers never deadlock), on SQLite by the write lock `BEGIN IMMEDIATE` takes (one
host). What was taken is kept beside it:

- `rpm` and `tpm` as a sliding window of grants, one row per call and kind, each counting
  for 60 seconds after it was taken (and a little slack, `ARRIVAL_SLACK_SECONDS`): a
  bucket never lets more than its limit through in any minute, and a call that does not
  fit is told exactly when it will (the moment enough of the oldest grants age out). A
  `tpm` grant holds the call's estimate until `settle` replaces it with the usage the
  answer reported.
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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from harness.contracts import Scope
from harness.store.base import EventStore
from harness.store.schema import metadata

WINDOW_SECONDS = 60.0
"""What `rpm` and `tpm` count over: any minute."""
ARRIVAL_SLACK_SECONDS = 5.0
"""How much longer than the window a grant counts. A request reaches the provider a
little after its turn was taken, and that delay varies (the tick's own bookkeeping, a
loaded host: 3.2 s apart on a machine at load 25, `ops/bench/RESULTS.md`): counting each
grant this much longer keeps the provider's minute within the limit while the delay
varies by up to this much, at the cost of a thirteenth of the rate."""
HELD_SECONDS = WINDOW_SECONDS + ARRIVAL_SLACK_SECONDS
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


class _Cursor:
    """One raw DBAPI cursor of a store transaction, for statements written with `?` marks.

    A check runs before every model call: SQLAlchemy's statement building and compiled
    cache cost more than SQLite's own work, so the statements go to the driver as text.
    """

    def __init__(self, conn: sa.Connection) -> None:
        self.postgres = conn.dialect.name == "postgresql"
        self.cursor = conn.connection.cursor()

    def run(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        """Run one statement; its rows (none for a write)."""
        self.cursor.execute(sql.replace("?", "%s") if self.postgres else sql, parameters)
        return list(self.cursor.fetchall()) if self.cursor.description else []

    def close(self) -> None:
        self.cursor.close()


@contextmanager
def _transaction(store: EventStore) -> Iterator[_Cursor]:
    """A write transaction; on PostgreSQL its commit does not wait for the WAL's flush.

    Buckets hold a minute of state: a server crash that loses the last fraction of a
    second of grants costs at most those calls counted again, and a flush per model call
    would cost more than the whole check.
    """
    with store.write_transaction() as conn:
        cursor = _Cursor(conn)
        try:
            if cursor.postgres:
                cursor.run("SET LOCAL synchronous_commit = off")
            yield cursor
        finally:
            cursor.close()


def _marks(values: Sequence[Any]) -> str:
    return ", ".join("?" * len(values))


def take(store: EventStore, scopes: Sequence[Scope], call: Call, clock: Clock = time.time) -> Turn:
    """Take the call's share from every bucket in scope, all or none, in one transaction.

    Raises:
        StoreError: the store cannot be reached or written.
    """
    if not scopes:
        return TAKEN
    keys = [key for key, _ in scopes]
    with _transaction(store) as cursor:
        now = clock()
        turn = max(
            (Turn(until - now, key, "retry_after") for key, until in _locked(cursor, keys).items()),
            key=lambda turn: turn.wait,
            default=TAKEN,
        )
        used = _used(cursor, scopes, now)
        windowed = [(key, limit) for key, limit in scopes if limit.rpm or limit.tpm]
        if windowed:
            waited = _window_turn(cursor, windowed, used, call, now)
            turn = max(turn, waited, key=lambda t: t.wait)
        parallel = [(key, limit) for key, limit in scopes if limit.max_parallel]
        if parallel:
            turn = max(turn, _parallel_turn(cursor, parallel, used, now), key=lambda t: t.wait)
        if turn.wait > 0:
            return turn
        _grant(cursor, scopes, call, now)
    return TAKEN


def settle(store: EventStore, call_id: str, tokens: int | None) -> None:
    """The call ended: its `tpm` grants count its real `tokens` (if known), its lease ends.

    Raises:
        StoreError: the store cannot be reached or written.
    """
    with _transaction(store) as cursor:
        if tokens is not None:
            cursor.run(
                "UPDATE rate_grants SET amount = ? WHERE call_id = ? AND kind = 'tpm'",
                (tokens, call_id),
            )
        cursor.run("DELETE FROM rate_leases WHERE call_id = ?", (call_id,))


def release_tick(store: EventStore, tick_id: str) -> int:
    """Free the parallel slots a tick still holds (it ended, maybe killed); returns how many."""
    with store.write_transaction() as conn:
        return conn.execute(rate_leases.delete().where(rate_leases.c.tick_id == tick_id)).rowcount


def block(store: EventStore, keys: Sequence[str], until: float) -> None:
    """Hold every call of these buckets back until `until` (a provider's `retry-after`)."""
    if not keys:
        return
    with _transaction(store) as cursor:
        larger = "GREATEST" if cursor.postgres else "MAX"
        for key in keys:
            cursor.run(
                "INSERT INTO rate_buckets (key, blocked_until) VALUES (?, ?) ON CONFLICT (key) "
                f"DO UPDATE SET blocked_until = {larger}(rate_buckets.blocked_until, "
                "excluded.blocked_until)",
                (key, until),
            )


def _locked(cursor: _Cursor, keys: list[str]) -> dict[str, float]:
    """Lock the buckets' rows (created on first use); their `blocked_until`, by key."""
    query = f"SELECT key, blocked_until FROM rate_buckets WHERE key IN ({_marks(keys)})"
    if cursor.postgres:
        query += " ORDER BY key FOR UPDATE"
    found = {key: float(until) for key, until in cursor.run(query, keys)}
    missing = [key for key in keys if key not in found]
    if missing:
        for key in missing:
            cursor.run(
                "INSERT INTO rate_buckets (key, blocked_until) VALUES (?, 0) "
                "ON CONFLICT (key) DO NOTHING",
                (key,),
            )
        found = {key: float(until) for key, until in cursor.run(query, keys)}
    return found


def _used(cursor: _Cursor, scopes: Sequence[Scope], now: float) -> dict[tuple[str, str], int]:
    """What each bucket holds now, read in one statement.

    (bucket, `rpm`|`tpm`) -> the last minute's grants, (bucket, `max_parallel`) -> its
    live leases. The aged grants are deleted on the way, on PostgreSQL in that same
    statement: each statement is a round trip to the server.
    """
    keys = [key for key, _ in scopes]
    marks, cutoff = _marks(keys), now - HELD_SECONDS
    delete = f"DELETE FROM rate_grants WHERE bucket IN ({marks}) AND at <= ?"
    select = (
        f"SELECT bucket, kind, SUM(amount) FROM rate_grants WHERE bucket IN ({marks}) "
        "AND at > ? GROUP BY bucket, kind UNION ALL "
        f"SELECT bucket, 'max_parallel', COUNT(*) FROM rate_leases WHERE bucket IN ({marks}) "
        "AND expires_at > ? GROUP BY bucket"
    )
    parameters = (*keys, cutoff, *keys, now)
    if cursor.postgres:
        rows = cursor.run(f"WITH aged AS ({delete}) {select}", (*keys, cutoff, *parameters))
    else:
        cursor.run(delete, (*keys, cutoff))
        rows = cursor.run(select, parameters)
    return {(bucket, kind): int(total) for bucket, kind, total in rows}


def _window_turn(
    cursor: _Cursor, scopes: list[Scope], used: dict[tuple[str, str], int], call: Call, now: float
) -> Turn:
    """The longest wait any bucket's last minute of grants imposes on the call (0: fits)."""
    turn = TAKEN
    for key, limit in scopes:
        for kind, cap, need in (("rpm", limit.rpm, 1), ("tpm", limit.tpm, call.tokens)):
            if cap is None:
                continue
            need = min(need, cap)  # a call larger than a minute's tokens takes a whole minute
            excess = used.get((key, kind), 0) + need - cap
            if excess > 0:
                wait = _aged_out(cursor, key, kind, excess, now) - now
                if wait > turn.wait:
                    turn = Turn(wait, key, kind)
    return turn


def _aged_out(cursor: _Cursor, key: str, kind: str, excess: int, now: float) -> float:
    """When the oldest grants worth `excess` will have left the window."""
    released = 0
    oldest = (
        "SELECT at, amount FROM rate_grants WHERE bucket = ? AND kind = ? AND at > ? ORDER BY at"
    )
    for at, amount in cursor.run(oldest, (key, kind, now - HELD_SECONDS)):
        released += int(amount)
        if released >= excess:
            return float(at) + HELD_SECONDS
    return 0.0  # grants settled lower since the sums were read: ask again now


def _parallel_turn(
    cursor: _Cursor, scopes: list[Scope], used: dict[tuple[str, str], int], now: float
) -> Turn:
    """Whether every bucket has a slot free, after reclaiming the slots of dead holders."""
    live = {key: used.get((key, "max_parallel"), 0) for key, _ in scopes}
    for key, limit in scopes:
        assert limit.max_parallel is not None
        if live.get(key, 0) < limit.max_parallel:
            continue
        # Full: the slots of holders that expired or died go back before anyone waits.
        cursor.run("DELETE FROM rate_leases WHERE bucket = ? AND expires_at <= ?", (key, now))
        holders = cursor.run("SELECT call_id, host, pid FROM rate_leases WHERE bucket = ?", (key,))
        dead = [call_id for call_id, host, pid in holders if _gone(host, pid)]
        for call_id in dead:
            cursor.run("DELETE FROM rate_leases WHERE call_id = ?", (call_id,))
        if len(holders) - len(dead) >= limit.max_parallel:
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


def _grant(cursor: _Cursor, scopes: Sequence[Scope], call: Call, now: float) -> None:
    grants = [
        (key, kind, call.call_id, now, amount)
        for key, limit in scopes
        for kind, cap, amount in (("rpm", limit.rpm, 1), ("tpm", limit.tpm, call.tokens))
        if cap is not None
    ]
    if grants:
        cursor.run(
            "INSERT INTO rate_grants (bucket, kind, call_id, at, amount) VALUES "
            + ", ".join(["(?, ?, ?, ?, ?)"] * len(grants)),
            [value for grant in grants for value in grant],
        )
    leases = [
        (call.call_id, key, call.tick_id, HOST, os.getpid(), now + call.lease_seconds)
        for key, limit in scopes
        if limit.max_parallel
    ]
    if leases:
        cursor.run(
            "INSERT INTO rate_leases (call_id, bucket, tick_id, host, pid, expires_at) VALUES "
            + ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(leases)),
            [value for lease in leases for value in lease],
        )
