"""A tick's job: its task, priority and lock, and the executor's view of the jobs.

The jobs live in procrastinate's tables in the store's database; every query on them is
the store's (`harness.store`: `defer_once`, `list_jobs`, `stalled_jobs`, …), run on its
connections in its transactions, so an outage is the store's `StoreError` here as
everywhere. This module says what tickwork puts in a job and reads back from one.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from procrastinate.jobs import Job

from harness.config import Settings
from harness.contracts import WorkerStarted
from harness.scheduling import SlotClaim
from harness.store import EventStore, defer_once, job_workers, list_jobs, stalled_jobs

TASK = "tickwork.run_tick"
"""The one procrastinate task: run the tick named by its `tick_id` argument."""


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


def _tick(job: Job) -> JobTick:
    return JobTick(str(job.task_kwargs["tick_id"]), str(job.task_kwargs["level"]), job.id)


def defer(
    store: EventStore, settings: Settings, locks: Locks, claims: Sequence[SlotClaim]
) -> list[str]:
    """Defer a job for every claim that has none yet; returns the tick ids deferred now."""
    jobs = [
        Job(
            queue=settings.executor.queue,
            priority=job_priority(settings, claim.level),
            lock=None,
            queueing_lock=None,
            task_name=TASK,
            task_kwargs={
                "tick_id": claim.tick_id,
                "level": claim.level,
                "slot": claim.slot.isoformat() if claim.slot else None,
            },
        )
        for claim in claims
    ]
    deferred = defer_once(store, jobs, lambda job: locks.next(_tick(job).level))
    return [_tick(job).tick_id for job in deferred]


def jobs_in(store: EventStore, statuses: Sequence[str]) -> list[JobTick]:
    """The tick jobs in `statuses` (todo, doing, …), oldest first."""
    return [_tick(job) for job in list_jobs(store, TASK, statuses)]


def stalled_ticks(store: EventStore, seconds: float) -> list[JobTick]:
    """The tick jobs `doing` on workers whose heartbeat is older than `seconds`."""
    return [_tick(job) for job in stalled_jobs(store, TASK, seconds)]


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
    starts = {e.data["worker_id"]: e.data for e in store.read_last(announced, [WorkerStarted.type])}
    return [
        WorkerState(
            worker.worker_id,
            starts.get(worker.worker_id, {}).get("host"),
            starts.get(worker.worker_id, {}).get("pid"),
            starts.get(worker.worker_id, {}).get("concurrency"),
            worker.running,
            worker.last_heartbeat,
        )
        for worker in job_workers(store)
    ]
