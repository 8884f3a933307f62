"""The procrastinate executor: a job per tick on the store's PostgreSQL, run by any host.

`tickwork run` decides and claims waves as with the local executor, then defers one job
per claimed tick (`ProcrastinateExecutor`); `tickwork worker`s on any host take the jobs
and run them through the runner and launcher (`WorkerExecutor`). The jobs live in
procrastinate's tables beside the events, so a deployment still needs nothing but
PostgreSQL.

The claim is the outbox. Deferring is idempotent, keyed by tick id: under one advisory
lock a tick that has a job already (in any state) gets no second one. A scheduler that
cannot defer retries until it can; one killed between its claim and the defer leaves a
claimed tick that any live `tickwork run` finds by liveness (`harness.scheduling.reconcile`;
on another host through `claimer_gone`) and defers, so a crash neither loses nor
duplicates a tick. A job delivered twice starts its tick once: the worker appends `TickTaken` at the
stream version it read, and only one append can land.

Priorities are procrastinate priorities (a lower tickwork number runs first); the global
cap is the sum of the workers' concurrency; a level's `max_concurrent` N holds across all
hosts through procrastinate locks: its jobs are spread over N lock names
(`tickwork:<level>:<k>`) and procrastinate runs at most one job of a lock at a time.
A worker whose heartbeat stops (SIGKILL, host lost) is found by any other worker
(`sweep_stalled`): each tick it had taken ends `TickLost` once (appended at the version
read), a job it had not yet taken is retried, and a surviving tick process on the
sweeper's host is killed with its group, and the model call it may have had in flight is
booked, estimated (`harness.execution.cutoff`), as the runner books a killed worker's.
Panels and hedges run on the worker that took the slot's job, their members and twins in
places of its concurrency that the job took before it started (`WorkerExecutor.seat`); a
dead worker's members and twins end with its job's tick.

The package follows procrastinate's own layout: `jobs` says what a tick's job holds (its
task, priority and lock) and reads the jobs back as ticks, `scheduler` is the side of
`tickwork run`, `worker` and `spacing` the side of `tickwork worker`, `loop` the worker
process, and `base` what both sides share. procrastinate's schema and every query on its
tables are the store's named operations (`harness.store`: `apply_procrastinate_schema`,
`defer_once`, `list_jobs`, …): no module here takes one of the store's connections. The
worker process's procrastinate `App` (`loop`) opens its own, to fetch and listen for jobs.
"""

from harness.execution.executors.procrastinate.jobs import (
    TASK,
    JobTick,
    Locks,
    WorkerState,
    defer,
    jobs_in,
    workers,
)
from harness.execution.executors.procrastinate.loop import WorkerLoop
from harness.execution.executors.procrastinate.scheduler import ProcrastinateExecutor
from harness.execution.executors.procrastinate.worker import (
    WorkerExecutor,
    WorkerRunner,
    places_needed,
)

__all__ = [
    "TASK",
    "JobTick",
    "Locks",
    "ProcrastinateExecutor",
    "WorkerExecutor",
    "WorkerLoop",
    "WorkerRunner",
    "WorkerState",
    "defer",
    "jobs_in",
    "places_needed",
    "workers",
]
