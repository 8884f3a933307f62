"""Every tick this host's dead processes left without a terminal event gets one.

A `tickwork run` (or `tickwork tick`) killed mid-tick leaves workers running in their
own process groups and tick streams without an end. Every running service keeps looking
(at start, then every `RECONCILE_SECONDS`), and decides by liveness, not by age: a tick
claimed but never started is `TickLost` once the process that claimed it (its
`TickScheduled` names host and pid) is gone; a started one is handed to the executor,
which adopts a worker that still runs (watched and killed at its original deadline),
completes a tick from the result file it wrote while nobody watched, and records
`TickLost` for the rest (`harness.execution.adopt`). Ticks of live processes, and those
claimed or started on other hosts, are theirs to end; except that a claim another host's
dead scheduler left unqueued is handed on by any live one when the executor can tell the
scheduler is gone (procrastinate: its queue outlives every scheduler).
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psutil

from harness.contracts import TERMINAL_TYPES, TickScheduled, TickStarted, tick_stream
from harness.projections import Projector, open_ticks
from harness.scheduling.handoff import Handoff
from harness.store import EventStore, StoredEvent

_LIFECYCLE = (TickScheduled.type, TickStarted.type, *TERMINAL_TYPES)
"""What reconciling reads of a tick: its claim, its starts and its end."""
RECONCILE_SECONDS = 10.0
"""How often a running service looks for ticks a dead process left open."""
NEVER_STARTED_AFTER = timedelta(seconds=60)
"""For a claim that names no process (an older tickwork's): its scheduler died if nobody
started it within this long."""


def reconcile(
    store: EventStore,
    executor: Handoff,
    projector: Projector,
    report: Callable[[str], None],
    never_started_after: timedelta = NEVER_STARTED_AFTER,
) -> None:
    """End every unfinished tick a dead process of this host left, or hand it on to adopt.

    The lifecycle events of all open ticks not watched here are read at once, not a
    stream per tick: with a thousand ticks queued (1,000 levels, a few places) the
    firing loop waited seconds on this every `RECONCILE_SECONDS`.
    """
    projector.catch_up(["ticks"])
    unfinished = open_ticks(store)
    watched = {tick.tick_id for tick in executor.running()}
    now = datetime.now(UTC)
    gone_elsewhere = functools.cache(executor.claimer_gone)  # a query per claimer, not per tick
    unwatched = [(tick_id, level) for tick_id, level in unfinished if tick_id not in watched]
    lifecycles = store.read_streams(
        [tick_stream(tick_id) for tick_id, _ in unwatched], types=_LIFECYCLE
    )
    for tick_id, level in unwatched:
        events = lifecycles[tick_stream(tick_id)]
        if not events or any(e.type in TERMINAL_TYPES for e in events):
            continue
        started = next((e for e in reversed(events) if e.type == TickStarted.type), None)
        if started is None:
            if abandoned(events[0], now, never_started_after, gone_elsewhere):
                became = executor.abandoned(tick_id, level)
                if became is not None:
                    report(f"{tick_id} {became}")
            continue
        if started.data.get("runner_pid") != os.getpid():
            executor.adopt(started, now)


def abandoned(
    scheduled: StoredEvent,
    now: datetime,
    never_started_after: timedelta,
    gone_elsewhere: Callable[[str, int], bool] = lambda host, pid: False,
) -> bool:
    """Whether the process that claimed the tick is gone (its TickScheduled says which).

    A process of another host is asked after through `gone_elsewhere` (the executor's
    `claimer_gone`: procrastinate's schedulers share a database that can tell); without
    it, it counts as alive.
    """
    host, pid = scheduled.data.get("host"), scheduled.data.get("scheduler_pid")
    if host is None or pid is None:
        return now - scheduled.recorded_at > never_started_after
    if host != socket.gethostname():
        return gone_elsewhere(host, pid)
    if pid == os.getpid():
        return False
    claimed_at = datetime.fromisoformat(scheduled.data["occurred_at"])
    try:
        created = datetime.fromtimestamp(psutil.Process(pid).create_time(), UTC)
    except psutil.NoSuchProcess:
        return True
    return created > claimed_at  # a new process reused the pid
