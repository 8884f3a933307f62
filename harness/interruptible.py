"""Joins that let a signal's handler run while they last.

Python runs a signal's handler in the main thread, between two bytecodes. The kernel
hands a signal sent to the process to any of its threads that does not block it, and
when another thread takes it, a main thread blocked in a join (a lock underneath) is not
woken: the handler waits for the join to end. So a second Ctrl-C on `tickwork run` did
nothing until the running ticks had finished (122 s in one run on a loaded machine), and
Ctrl-C on `tickwork tick` nothing until its tick had. A join in slices returns to the
interpreter after each one, which runs a handler that is due; a signal waits one slice.
"""

from __future__ import annotations

import threading
import time

SLICE_SECONDS = 0.2
"""The longest a due signal handler waits while the main thread joins."""


def join(thread: threading.Thread, timeout: float | None = None) -> None:
    """`thread.join(timeout)`, in slices of `SLICE_SECONDS`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while thread.is_alive():
        left = SLICE_SECONDS if deadline is None else deadline - time.monotonic()
        if left <= 0:
            return
        thread.join(min(SLICE_SECONDS, left))
