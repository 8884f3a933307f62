"""Which tickwork processes live: each scheduler and worker beats into the store.

Without it, `status` and the dashboard kept showing the next slot of every level as if
a scheduler would fire it, long after `tickwork run` had died. A process's row is
updated in place every `BEAT_SECONDS` (so the table does not grow with time) and deleted
when it stops; a process whose last beat is older than `LIVE_FOR` is not running. A
killed process leaves its row behind, shown as the last one seen; every beat deletes the
rows whose last beat is older than `PRUNE_AFTER`, so the table holds the processes alive
or dead within the last day.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal

import sqlalchemy as sa

from harness.store.base import EventStore
from harness.store.records import StoreError
from harness.store.schema import metadata
from harness.store.sql import upsert
from harness.timespec import as_utc

Role = Literal["scheduler", "worker"]

BEAT_SECONDS = 5.0
LIVE_FOR = timedelta(seconds=3 * BEAT_SECONDS)
"""A process silent this long is not running: three beats missed."""
PRUNE_AFTER = timedelta(days=1)
SHOWN = 20

heartbeats = sa.Table(
    "heartbeats",
    metadata,
    sa.Column("process_id", sa.String(64), primary_key=True),
    sa.Column("role", sa.String(20), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer(), nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("beat_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("upstream", sa.Text()),
    sa.Column("wires", sa.Text()),
    sa.Index("ix_heartbeats_beat_at", "beat_at"),
)
"""Migration 0013. `upstream`: the fake upstream a scheduler serves its ticks, if any, so
a `tickwork tick` on the same host uses the same one (never a real endpoint's address,
which may carry credentials).

`wires` (migration 0035): JSON, each wire protocol -> where the scheduler's ticks on it
go, as its banner says (`TickUpstream.describe`: hosts and variable names, no URL's
credentials, no key), so the dashboard of another process can say it."""


@dataclass(frozen=True)
class Beat:
    """A process as its last beat left it."""

    role: str
    host: str
    pid: int
    started_at: datetime
    beat_at: datetime
    upstream: str | None = None
    wires: Mapping[str, str] = field(default_factory=dict)
    """Wire protocol -> where the process's ticks on it go (a scheduler's; empty: unknown)."""

    def live(self, now: datetime) -> bool:
        """Whether it beat recently enough to count as running."""
        return now - self.beat_at < LIVE_FOR


class Heartbeat:
    """This process's row: `beat` while it runs (a thread via `run`), `stop` when it ends."""

    def __init__(
        self,
        store: EventStore,
        role: Role,
        upstream: str | None = None,
        wires: Mapping[str, str] | None = None,
    ) -> None:
        self.store = store
        self.role = role
        self.upstream = upstream
        self.wires = json.dumps(dict(wires)) if wires else None
        self.process_id = uuid.uuid4().hex
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.started_at = datetime.now(UTC)

    def beat(self) -> None:
        """Say this process lives, and forget processes silent for longer than PRUNE_AFTER.

        Raises:
            StoreError: the store cannot take it (the next beat tries again).
        """
        now = datetime.now(UTC)
        row = {
            "process_id": self.process_id,
            "role": self.role,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at,
            "beat_at": now,
            "upstream": self.upstream,
            "wires": self.wires,
        }
        with self.store.write_transaction() as conn:
            insert = upsert(conn, heartbeats)
            conn.execute(
                insert.on_conflict_do_update(
                    index_elements=["process_id"], set_={"beat_at": insert.excluded.beat_at}
                ),
                [row],
            )
            conn.execute(heartbeats.delete().where(heartbeats.c.beat_at < now - PRUNE_AFTER))

    def run(self, stopping: threading.Event, failed: Callable[[StoreError], None]) -> None:
        """Beat every BEAT_SECONDS until `stopping` is set, then delete the row.

        A beat the store cannot take (out, or no connection free) is tried again at the
        next; `failed` hears of the first of a run of them only.
        """
        failing = False
        while True:
            try:
                self.beat()
            except StoreError as exc:
                if not failing:
                    failed(exc)
                failing = True
            else:
                failing = False
            if stopping.wait(BEAT_SECONDS):
                break
        self.stop()

    @contextmanager
    def beating(self, failed: Callable[[StoreError], None]) -> Iterator[Heartbeat]:
        """Beat on a thread of its own while the block runs; the row leaves with the block."""
        stopping = threading.Event()
        thread = threading.Thread(
            target=self.run, args=(stopping, failed), name="heartbeat", daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            stopping.set()
            thread.join()

    def stop(self) -> None:
        """Delete this process's row: it stopped, it is not a dead process to show."""
        try:
            with self.store.write_transaction() as conn:
                conn.execute(heartbeats.delete().where(heartbeats.c.process_id == self.process_id))
        except StoreError:
            pass  # its row ages out as a dead process's does


def beats(store: EventStore) -> list[Beat]:
    """The processes that beat last, newest first: the live ones and the last seen dead.

    At most SHOWN rows, read down the beat index: a service restarted in a loop for a
    day leaves one dead row per start until they are pruned.
    """
    query = sa.select(heartbeats).order_by(heartbeats.c.beat_at.desc()).limit(SHOWN)
    with store.read_transaction() as conn:
        return [
            Beat(
                row.role,
                row.host,
                row.pid,
                as_utc(row.started_at),
                as_utc(row.beat_at),
                row.upstream,
                json.loads(row.wires) if row.wires else {},
            )
            for row in conn.execute(query)
        ]
