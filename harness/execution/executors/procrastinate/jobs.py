"""The tick jobs in procrastinate's tables: deferred, listed, and the workers that take them."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import orjson

from harness.config import Settings
from harness.scheduling.waves import SlotClaim
from harness.store import (
    EventStore,
)

TASK = "tickwork.run_tick"
"""The one procrastinate task: run the tick named by its `tick_id` argument."""
DEFER_LOCK = 0x7469636B
"""Advisory lock held while checking for a tick's job and deferring it ("tick")."""


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


def defer(
    store: EventStore, settings: Settings, locks: Locks, claims: Sequence[SlotClaim]
) -> list[str]:
    """Defer a job for every claim that has none yet; returns the tick ids deferred now."""
    if not claims:
        return []
    ids = [claim.tick_id for claim in claims]
    with store.read_transaction() as conn:
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": DEFER_LOCK})
        existing = set(
            conn.exec_driver_sql(
                "SELECT args->>'tick_id' FROM procrastinate_jobs "
                "WHERE args->>'tick_id' = ANY(%(ids)s) AND task_name = %(task)s",
                {"ids": ids, "task": TASK},
            ).scalars()
        )
        fresh = [claim for claim in claims if claim.tick_id not in existing]
        if not fresh:
            return []
        slots = [claim.slot.isoformat() if claim.slot else None for claim in fresh]
        conn.exec_driver_sql(
            "SELECT procrastinate_defer_jobs_v1(ARRAY(SELECT ROW(%(queue)s, %(task)s, "
            "p, l, NULL, a, NULL)::procrastinate_job_to_defer_v1 "
            "FROM unnest(%(priorities)s::int[], %(locks)s::text[], %(args)s::jsonb[]) "
            "AS jobs(p, l, a)))",
            {
                "queue": settings.executor.queue,
                "task": TASK,
                "priorities": [job_priority(settings, claim.level) for claim in fresh],
                "locks": [locks.next(claim.level) for claim in fresh],
                "args": [
                    orjson.dumps({"tick_id": c.tick_id, "level": c.level, "slot": s}).decode()
                    for c, s in zip(fresh, slots, strict=True)
                ],
            },
        )
    return [claim.tick_id for claim in fresh]


def jobs_in(store: EventStore, statuses: Sequence[str]) -> list[JobTick]:
    """The tick jobs in `statuses` (todo, doing, …), oldest first."""
    with store.read_transaction() as conn:
        rows = conn.exec_driver_sql(
            "SELECT id, args->>'tick_id', args->>'level' FROM procrastinate_jobs "
            "WHERE task_name = %(task)s AND status::text = ANY(%(statuses)s) ORDER BY id",
            {"task": TASK, "statuses": list(statuses)},
        ).all()
    return [JobTick(tick_id, level, job_id) for job_id, tick_id, level in rows]


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
    with store.read_transaction() as conn:
        rows = conn.exec_driver_sql(
            "SELECT w.id, w.last_heartbeat, count(j.id) FROM procrastinate_workers w "
            "LEFT JOIN procrastinate_jobs j ON j.worker_id = w.id AND j.status = 'doing' "
            "GROUP BY w.id ORDER BY w.id"
        ).all()
    starts = {e.data["worker_id"]: e.data for e in store.read_last(announced, ["WorkerStarted"])}
    return [
        WorkerState(
            worker_id,
            starts.get(worker_id, {}).get("host"),
            starts.get(worker_id, {}).get("pid"),
            starts.get(worker_id, {}).get("concurrency"),
            running,
            heartbeat,
        )
        for worker_id, heartbeat, running in rows
    ]


def conninfo(url: str) -> str:
    """The store's SQLAlchemy URL as a libpq connection string for procrastinate."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
