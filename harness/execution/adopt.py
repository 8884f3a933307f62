"""A tick a killed predecessor started on this host: adopt its worker, or end the tick.

A worker that still runs is watched again and killed at its original deadline; one that
is gone ends the tick from the result file it wrote while nobody watched, or as
`TickLost` when it left none. The pid is trusted only while it is still our worker (not a
process that reused the pid), and a tick a live replica on this host watches is left to
it.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil

from harness.contracts import TickLost
from harness.execution.launchers import TickProcess
from harness.execution.launchers.cold import WORKER_MODULE
from harness.execution.prepare import TickRef
from harness.execution.runner import Runner
from harness.store import StoredEvent


@dataclass(frozen=True)
class Adoption:
    """A worker still running: watch it for the `remaining` seconds of its timeout."""

    ref: TickRef
    process: TickProcess
    remaining: float


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


def started_ref(started: StoredEvent) -> TickRef | None:
    """What the runner needs to end the tick of `started` (None: an older tickwork's)."""
    data = started.data
    if not data.get("result_path") or data.get("timeout_seconds") is None:
        return None
    return TickRef(
        data["tick_id"],
        data["level"],
        Path(data["result_path"]),
        Path(data["log_path"]),
        data["timeout_seconds"],
    )


def adopt(
    runner: Runner, started: StoredEvent, now: datetime, report: Callable[[str], None]
) -> Adoption | None:
    """End the tick of `started` (its TickStarted), or say which worker to watch to its end."""
    data = started.data
    if data["host"] != socket.gethostname():
        return None
    tick_id, level = data["tick_id"], data["level"]
    if _watched(data.get("runner_pid"), datetime.fromisoformat(data["occurred_at"])):
        return None  # a live scheduler on this host (a replica) still watches it
    ref = started_ref(started)
    if ref is None:
        runner.record(TickLost(tick_id=tick_id, level=level, reason="started by an older tickwork"))
        return None
    started_at = datetime.fromisoformat(data["occurred_at"])
    process = TickProcess(int(data["pid"]))
    if _is_worker(process.pid, started_at):
        remaining = (started_at + timedelta(seconds=ref.timeout) - now).total_seconds()
        report(f"{tick_id} adopted: its worker {process.pid} still runs ({remaining:.0f} s left)")
        return Adoption(ref, process, remaining)
    for pid in process.survivors():
        os.kill(pid, signal.SIGKILL)
    if ref.result_path.exists():
        terminal = runner.terminal(ref, None, timed_out=False).event
        report(f"{tick_id} ended while no scheduler watched: {terminal.type}")
    else:
        runner.book_cut_off_call(ref)
        terminal = TickLost(
            tick_id=tick_id, level=level, reason="its worker is gone and left no result file"
        )
        report(f"{tick_id} lost (its worker is gone and left no result file)")
    runner.record(terminal)
    runner.alert_governor(ref)
    return None
