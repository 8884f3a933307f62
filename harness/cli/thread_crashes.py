"""A thread of a service that meets an unexpected error ends the service, in one line.

Python's default prints `Exception in thread …` with a traceback and lets the rest of the
process run on without the thread: an executor thread left its tick without an end, a
worker's heartbeat thread left a worker taking jobs while it looked dead to every other
host. A service stops instead, as SIGTERM stops it (running ticks get their grace), and
the next start reconciles whatever the thread left open. `tickwork serve` stops as its
HTTP server stops at SIGTERM, finishing the requests in flight.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from harness.contracts import redact


class ThreadCrashes:
    """Installed for the life of a service (`tickwork run`, `tickwork worker`, `tickwork serve`).

    `stop`: how the service is told to stop; by default SIGTERM to this process.
    """

    def __init__(
        self, report: Callable[[str], None], stop: Callable[[], None] | None = None
    ) -> None:
        self.report = report
        self.stop = stop or terminate
        self.happened = threading.Event()
        """Whether a thread ended on an unexpected error: the service then exits 1."""

    def install(self) -> None:
        """Every thread's uncaught exception comes here instead of Python's printer."""
        threading.excepthook = self._crashed

    def _crashed(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "a thread"
        already = self.happened.is_set()
        self.happened.set()
        self.report(
            f"stopping: thread {name} ended on an unexpected error, "
            f"{args.exc_type.__name__}: {redact(str(args.exc_value))}"
        )
        if not already:
            self.stop()


def terminate() -> None:
    """Stop this process as an operator's SIGTERM does."""
    os.kill(os.getpid(), signal.SIGTERM)
