"""procrastinate's jobs in the store's database: every query tickwork runs on its tables.

The jobs live beside the events and are written through the store's write handle, so an
outage is the store's `StoreError` here as everywhere. procrastinate's `JobManager` runs
its own queries on `StoreConnector`, whose queries run on psycopg's connection in the
store's transactions (`driver_transaction`) as procrastinate's psycopg connector runs
them; what procrastinate has no call for (deferring only the jobs of ticks that have
none, the workers with the jobs they run) is this module's SQL. The executor asks these
operations and never holds the connection, as `eventsourcing`'s recorders expose no
database handle.

A job belongs to the tick named by its `tick_id` argument: a tick has one job at most,
in any state (`defer_once`), and a job ends with its row kept (`fail_job`) so that it
stays that tick's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
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

from harness.store.base import EventStore

DEFER_LOCK = 0x7469636B
"""Advisory lock held while checking for a tick's job and deferring it ("tick")."""

LOCK_DEFERRING: LiteralString = "SELECT pg_advisory_xact_lock(%(key)s)"
JOBS_OF_TICKS: LiteralString = (
    "SELECT task_name, args->>'tick_id' AS tick_id FROM procrastinate_jobs "
    "WHERE args->>'tick_id' = ANY(%(ids)s) AND task_name = ANY(%(tasks)s)"
)
"""The jobs of the ticks among `ids`, in any state (`procrastinate_schema`'s index on the
tick id serves it)."""
WORKERS: LiteralString = (
    "SELECT w.id, w.last_heartbeat, count(j.id) AS running FROM procrastinate_workers w "
    "LEFT JOIN procrastinate_jobs j ON j.worker_id = w.id AND j.status = 'doing' "
    "GROUP BY w.id ORDER BY w.id"
)


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


def _manager(store: EventStore) -> JobManager:
    return JobManager(StoreConnector(store))


def _tick_of(job: Job) -> str:
    return str(job.task_kwargs["tick_id"])


def defer_once(
    store: EventStore, jobs: Sequence[Job], lock: Callable[[Job], str | None]
) -> list[Job]:
    """Defer each job whose tick has no job of its task yet; returns them, with their ids.

    The check and the defer share one transaction under DEFER_LOCK: two schedulers
    deferring one tick (a claim one took on from the other) defer it once, and a defer
    cut short by an outage leaves no job behind. Each job deferred takes `lock(job)` as
    its procrastinate lock, asked in order and only of those: a tick that has its job
    already takes no turn of a level's locks.
    """
    if not jobs:
        return []
    connector = StoreConnector(store)
    with store.driver_transaction() as conn:
        connector.execute_query_all_with_connection(conn, LOCK_DEFERRING, key=DEFER_LOCK)
        rows = connector.execute_query_all_with_connection(
            conn,
            JOBS_OF_TICKS,
            ids=[_tick_of(job) for job in jobs],
            tasks=sorted({job.task_name for job in jobs}),
        )
        existing = {(row["task_name"], row["tick_id"]) for row in rows}
        fresh = [
            job.evolve(lock=lock(job))
            for job in jobs
            if (job.task_name, _tick_of(job)) not in existing
        ]
        if not fresh:
            return []
        return JobManager(connector).batch_defer_jobs(fresh, connection=conn)


def list_jobs(store: EventStore, task: str, statuses: Sequence[str]) -> list[Job]:
    """The jobs of `task` in `statuses` (todo, doing, …), oldest first."""
    manager = _manager(store)
    found = [job for status in statuses for job in manager.list_jobs(task=task, status=status)]
    return sorted(found, key=lambda job: job.id or 0)


def cancel_job(store: EventStore, job_id: int, *, abort: bool) -> bool:
    """Cancel a job still `todo`; `abort`: also ask the worker running it to stop it.

    False when it was in neither state (taken meanwhile, or ended).
    """
    return _manager(store).cancel_job_by_id(job_id, abort=abort)


def stalled_jobs(store: EventStore, task: str, seconds: float) -> list[Job]:
    """The jobs of `task` `doing` on workers whose heartbeat is older than `seconds`."""
    stalled = _manager(store).get_stalled_jobs(task_name=task, seconds_since_heartbeat=seconds)
    return list(asyncio.run(stalled))


def retry_job(store: EventStore, job_id: int) -> None:
    """Put a job back in its queue, to be taken at once."""
    _manager(store).retry_job_by_id(job_id, retry_at=datetime.now(UTC))


def fail_job(store: EventStore, job_id: int) -> None:
    """End a job as failed (its tick was ended for it), keeping its row."""
    asyncio.run(_manager(store).finish_job_by_id_async(job_id, Status.FAILED, delete_job=False))


@dataclass(frozen=True)
class JobWorker:
    """A worker procrastinate knows (alive, or not yet pruned)."""

    worker_id: int
    last_heartbeat: datetime
    running: int
    """Its jobs `doing` now."""


def job_workers(store: EventStore) -> list[JobWorker]:
    """The workers procrastinate knows, by id, with how many jobs each runs now."""
    rows = StoreConnector(store).execute_query_all(WORKERS)
    return [JobWorker(row["id"], row["last_heartbeat"], row["running"]) for row in rows]
