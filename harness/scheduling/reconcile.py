"""On start, every tick this host left without a terminal event gets one.

A `tickwork run` killed mid-tick leaves workers running in their own process groups and
tick streams without an end. Its successor adopts a worker that still runs (watched and
killed at its original deadline), completes a tick from the result file it wrote while
nobody watched, and records `TickLost` for the rest. Ticks started on other hosts are
theirs to reconcile.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

from harness.contracts.events import TERMINAL_TYPES, TickLost, tick_stream
from harness.execution.launchers import TickProcess
from harness.execution.launchers.cold import WORKER_MODULE
from harness.execution.runner import Runner, TickRef
from harness.projections import Projector
from harness.projections.ticks import open_ticks
from harness.store import SqlEventStore, StoredEvent

NEVER_STARTED_AFTER = timedelta(seconds=60)
"""A claimed tick nobody started within this long: its scheduler died in between."""


def _is_worker(pid: int, started_at: datetime) -> bool:
    """The pid is still the worker we started (not a new process that reused the pid)."""
    try:
        process = psutil.Process(pid)
        created = datetime.fromtimestamp(process.create_time(), UTC)
        return (
            process.status() != psutil.STATUS_ZOMBIE
            and os.getpgid(pid) == pid
            and WORKER_MODULE in " ".join(process.cmdline())
            and created <= started_at + timedelta(seconds=5)
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
        return False


def _watched(runner_pid: int | None, started_at: datetime) -> bool:
    """The runner that started the tick still lives (and is not a reused pid)."""
    if runner_pid is None or runner_pid == os.getpid():
        return False
    try:
        created = datetime.fromtimestamp(psutil.Process(runner_pid).create_time(), UTC)
    except psutil.NoSuchProcess:
        return False
    return created <= started_at


def reconcile(
    store: SqlEventStore,
    runner: Runner,
    projector: Projector,
    report: Callable[[str], None],
    never_started_after: timedelta = NEVER_STARTED_AFTER,
) -> list[threading.Thread]:
    """End or adopt every unfinished tick of this host; returns the threads watching adoptees."""
    projector.catch_up(["ticks"])
    with store.read_transaction() as conn:
        unfinished = open_ticks(conn)
    watchers = []
    now = datetime.now(UTC)
    for tick_id, level in unfinished:
        events = store.read_stream(tick_stream(tick_id))
        if not events or any(e.type in TERMINAL_TYPES for e in events):
            continue
        started = next((e for e in reversed(events) if e.type == "TickStarted"), None)
        if started is None:
            if now - events[0].recorded_at > never_started_after:
                lost = "claimed but never started: its scheduler stopped first"
                runner.record(TickLost(tick_id=tick_id, level=level, reason=lost))
                report(f"{tick_id} lost ({lost})")
            continue
        watcher = _finish(runner, started, now, report)
        if watcher is not None:
            watchers.append(watcher)
    return watchers


def _finish(
    runner: Runner, started: StoredEvent, now: datetime, report: Callable[[str], None]
) -> threading.Thread | None:
    data = started.data
    if data["host"] != socket.gethostname():
        return None
    tick_id, level = data["tick_id"], data["level"]
    if _watched(data.get("runner_pid"), datetime.fromisoformat(data["occurred_at"])):
        return None  # a live scheduler on this host (a replica) still watches it
    if not data.get("result_path") or data.get("timeout_seconds") is None:
        runner.record(TickLost(tick_id=tick_id, level=level, reason="started by an older tickwork"))
        return None
    ref = TickRef(
        tick_id, level, Path(data["result_path"]), Path(data["log_path"]), data["timeout_seconds"]
    )
    started_at = datetime.fromisoformat(data["occurred_at"])
    process = TickProcess(int(data["pid"]))
    if _is_worker(process.pid, started_at):
        remaining = (started_at + timedelta(seconds=ref.timeout) - now).total_seconds()
        report(f"{tick_id} adopted: its worker {process.pid} still runs ({remaining:.0f} s left)")
        watcher = threading.Thread(
            target=runner.watch, args=(ref, process, remaining), name=tick_id, daemon=True
        )
        watcher.start()
        return watcher
    for pid in process.survivors():
        os.kill(pid, signal.SIGKILL)
    if ref.result_path.exists():
        terminal = runner.terminal(ref, None, timed_out=False)
        report(f"{tick_id} ended while no scheduler watched: {terminal.type}")
    else:
        terminal = TickLost(
            tick_id=tick_id, level=level, reason="its worker is gone and left no result file"
        )
        report(f"{tick_id} lost (its worker is gone and left no result file)")
    runner.record(terminal)
    return None
