"""Every query on procrastinate's tables, through procrastinate's `JobManager` where it has one.

The jobs live in the store's database beside the events, and are written through the
store's write handle: `StoreConnector` is a procrastinate connector whose queries run
on psycopg's connection in the store's transactions (`driver_transaction`), as
procrastinate's own psycopg connector runs them, so an outage is the store's
`StoreError` here as everywhere, and a job is deferred in the transaction that found
its tick without one.
What procrastinate has no call for (the jobs of given ticks, the workers with their
running jobs, a scheduler's connections) is SQL of this module alone.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, LiteralString

from procrastinate import BaseConnector
from procrastinate.exceptions import NoResult
from procrastinate.jobs import Job, Status
from procrastinate.manager import JobManager
from psycopg import Connection
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from harness.config import Settings
from harness.contracts import WorkerStarted
from harness.scheduling import SlotClaim
from harness.store import EventStore

TASK = "tickwork.run_tick"
"""The one procrastinate task: run the tick named by its `tick_id` argument."""
DEFER_LOCK = 0x7469636B
"""Advisory lock held while checking for a tick's job and deferring it ("tick")."""

LOCK_DEFERRING: LiteralString = "SELECT pg_advisory_xact_lock(%(key)s)"
TICKS_WITH_JOBS: LiteralString = (
    "SELECT args->>'tick_id' AS tick_id FROM procrastinate_jobs "
    "WHERE args->>'tick_id' = ANY(%(ids)s) AND task_name = %(task)s"
)
"""The ticks among `ids` that have a job, in any state (an index on the tick id serves it)."""
WORKERS: LiteralString = (
    "SELECT w.id, w.last_heartbeat, count(j.id) AS running FROM procrastinate_workers w "
    "LEFT JOIN procrastinate_jobs j ON j.worker_id = w.id AND j.status = 'doing' "
    "GROUP BY w.id ORDER BY w.id"
)
RECENTLY_ACTIVE: LiteralString = (
    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = %(name)s "
    "AND coalesce(state_change, backend_start) > now() - make_interval(secs => %(seconds)s)) "
    "AS active"
)


@dataclass(frozen=True)
class JobTick:
    """A tick as a job carries it."""

    tick_id: str
    level: str
    job_id: int | None = None


def job_priority(settings: Settings, level: str) -> int:
    """Higher procrastinate priorities run first, and lower tickwork numbers."""
    config = settings.levels.get(level)
    return -config.priority if config is not None else 0


class Locks:
    """Spreads a level's jobs over as many procrastinate locks as its `max_concurrent`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._turns: dict[str, Iterator[int]] = defaultdict(itertools.count)

    def next(self, level: str) -> str | None:
        """The lock of the level's next job; None for a level without a cap."""
        config = self.settings.levels.get(level)
        cap = config.max_concurrent if config is not None else None
        if cap is None:
            return None
        return f"tickwork:{level}:{next(self._turns[level]) % cap}"


class StoreConnector(BaseConnector):
    """procrastinate's queries on the store's connections, each in a transaction of its own.

    A query given a connection (`JobManager`'s `connection=`) joins its transaction.
    The store is synchronous: the async calls run where they are awaited, which is only
    ever an `asyncio.run` of this module (`stalled_jobs`, `fail_job`).
    """

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def get_sync_connector(self) -> BaseConnector:
        """Itself: every query of it is synchronous underneath."""
        return self

    def execute_query(self, query: LiteralString, **arguments: Any) -> None:
        """Run a statement in a transaction of its own."""
        self.execute_query_all(query, **arguments)

    def execute_query_one(self, query: LiteralString, **arguments: Any) -> dict[str, Any]:
        """The first row of a query in a transaction of its own (NoResult: no row)."""
        rows = self.execute_query_all(query, **arguments)
        if not rows:
            raise NoResult
        return rows[0]

    def execute_query_all(self, query: LiteralString, **arguments: Any) -> list[dict[str, Any]]:
        """The rows of a query in a transaction of its own."""
        with self.store.driver_transaction() as conn:
            return self.execute_query_all_with_connection(conn, query, **arguments)

    def execute_query_all_with_connection(
        self, connection: Connection[Any], query: LiteralString, **arguments: Any
    ) -> list[dict[str, Any]]:
        """The rows of a query in the caller's transaction."""
        with connection.cursor(row_factory=dict_row) as cursor:
            cursor.execute(query, {k: _jsonb(v) for k, v in arguments.items()})
            return cursor.fetchall() if cursor.description is not None else []

    async def execute_query_async(self, query: LiteralString, **arguments: Any) -> None:
        """`execute_query`, blocking the loop it is awaited in."""
        self.execute_query(query, **arguments)

    async def execute_query_all_async(
        self, query: LiteralString, **arguments: Any
    ) -> list[dict[str, Any]]:
        """`execute_query_all`, blocking the loop it is awaited in."""
        return self.execute_query_all(query, **arguments)


def _jsonb(value: Any) -> Any:
    """A query argument as procrastinate's psycopg connectors pass it: dicts as JSONB."""
    if isinstance(value, dict):
        return Jsonb(value)
    if isinstance(value, list):
        return [_jsonb(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_jsonb(item) for item in value)
    return value


def _jobs(store: EventStore) -> JobManager:
    return JobManager(StoreConnector(store))


def _tick(job: Job) -> JobTick:
    return JobTick(str(job.task_kwargs["tick_id"]), str(job.task_kwargs["level"]), job.id)


def defer(
    store: EventStore, settings: Settings, locks: Locks, claims: Sequence[SlotClaim]
) -> list[str]:
    """Defer a job for every claim that has none yet; returns the tick ids deferred now."""
    if not claims:
        return []
    connector = StoreConnector(store)
    with store.driver_transaction() as conn:
        connector.execute_query_all_with_connection(conn, LOCK_DEFERRING, key=DEFER_LOCK)
        rows = connector.execute_query_all_with_connection(
            conn, TICKS_WITH_JOBS, ids=[claim.tick_id for claim in claims], task=TASK
        )
        existing = {row["tick_id"] for row in rows}
        fresh = [claim for claim in claims if claim.tick_id not in existing]
        if not fresh:
            return []
        jobs = [
            Job(
                queue=settings.executor.queue,
                priority=job_priority(settings, claim.level),
                lock=locks.next(claim.level),
                queueing_lock=None,
                task_name=TASK,
                task_kwargs={
                    "tick_id": claim.tick_id,
                    "level": claim.level,
                    "slot": claim.slot.isoformat() if claim.slot else None,
                },
            )
            for claim in fresh
        ]
        JobManager(connector).batch_defer_jobs(jobs, connection=conn)
    return [claim.tick_id for claim in fresh]


def jobs_in(store: EventStore, statuses: Sequence[str]) -> list[JobTick]:
    """The tick jobs in `statuses` (todo, doing, …), oldest first."""
    manager = _jobs(store)
    found = [job for status in statuses for job in manager.list_jobs(task=TASK, status=status)]
    return [_tick(job) for job in sorted(found, key=lambda job: job.id or 0)]


def cancel_job(store: EventStore, job_id: int, *, abort: bool) -> bool:
    """Cancel a job still `todo`; `abort`: also ask the worker running it to stop it.

    False when it was in neither state (taken meanwhile, or ended).
    """
    return _jobs(store).cancel_job_by_id(job_id, abort=abort)


def stalled_jobs(store: EventStore, seconds: float) -> list[JobTick]:
    """The tick jobs `doing` on workers whose heartbeat is older than `seconds`."""
    stalled = asyncio.run(
        _jobs(store).get_stalled_jobs(task_name=TASK, seconds_since_heartbeat=seconds)
    )
    return [_tick(job) for job in stalled]


def retry_job(store: EventStore, job_id: int) -> None:
    """Put a job back in its queue, to be taken at once."""
    _jobs(store).retry_job_by_id(job_id, retry_at=datetime.now(UTC))


def fail_job(store: EventStore, job_id: int) -> None:
    """End a job as failed (its tick was ended for it), keeping its row."""
    asyncio.run(_jobs(store).finish_job_by_id_async(job_id, Status.FAILED, delete_job=False))


def connected(store: EventStore, name: str, seconds: float) -> bool:
    """Whether a connection named `name` is open and was active in the last `seconds`."""
    [row] = StoreConnector(store).execute_query_all(RECENTLY_ACTIVE, name=name, seconds=seconds)
    return bool(row["active"])


@dataclass(frozen=True)
class WorkerState:
    """A registered worker as `tickwork status` and the API show it."""

    worker_id: int
    host: str | None
    pid: int | None
    concurrency: int | None
    running: int
    last_heartbeat: datetime


def workers(store: EventStore, announced: int = 1000) -> list[WorkerState]:
    """The workers procrastinate knows (alive, or not yet pruned), with what they announced."""
    rows = StoreConnector(store).execute_query_all(WORKERS)
    starts = {e.data["worker_id"]: e.data for e in store.read_last(announced, [WorkerStarted.type])}
    return [
        WorkerState(
            row["id"],
            starts.get(row["id"], {}).get("host"),
            starts.get(row["id"], {}).get("pid"),
            starts.get(row["id"], {}).get("concurrency"),
            row["running"],
            row["last_heartbeat"],
        )
        for row in rows
    ]
