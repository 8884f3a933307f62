"""A tick ended from outside records what it had in flight before its process goes.

The runner ends a tick (a cancel, its deadline) with SIGTERM to its process group, a grace,
then SIGKILL. In the grace the worker writes down what only it knows: the tool still
running, killed with the tick, and the model call still in flight, booked estimated with
the facts it saw (the runner's own booking of a call cut off has only its start).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def recorded_on_sigterm(*records: Callable[[], None]) -> Iterator[None]:
    """While inside, SIGTERM runs `records` in turn, then ends the process as SIGTERM does."""

    def on_term(signum: int, frame: FrameType | None) -> None:
        for record in records:
            record()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
