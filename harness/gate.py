"""Places for ticks to run: a global cap, per-level caps, priorities and spaced starts.

Waiters are served lowest priority number first, first come first served within a
priority; a waiter whose level is at its own cap does not hold up those behind it. A
waiter that gives up (cancelled, service stopping) leaves the queue without taking a
place, so nothing leaks. Consecutive starts are at least `spacing` seconds apart, so a
wave of slots at :00 does not spawn every worker in the same instant.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

POLL_SECONDS = 0.1


@dataclass(order=True)
class _Ticket:
    priority: int
    sequence: int
    level: str = field(compare=False)


class Gate:
    def __init__(self, total: int, per_level: dict[str, int | None], spacing: float = 0.0):
        self.total = total
        self.per_level = per_level
        self.spacing = spacing
        self._condition = threading.Condition()
        self._waiting: list[_Ticket] = []
        self._running: Counter[str] = Counter()
        self._last_start = 0.0
        self._sequence = itertools.count()

    def acquire(self, level: str, priority: int, gave_up: Callable[[], bool]) -> bool:
        """Wait for a place; False (and no place taken) once `gave_up()` turns true."""
        ticket = _Ticket(priority, next(self._sequence), level)
        with self._condition:
            bisect.insort(self._waiting, ticket)
            try:
                while True:
                    if gave_up():
                        return False
                    wait = self._wait_for(ticket)
                    if wait == 0.0:
                        self._running[level] += 1
                        self._last_start = time.monotonic()
                        self._waiting.remove(ticket)
                        self._condition.notify_all()
                        return True
                    self._condition.wait(min(wait, POLL_SECONDS))
            finally:
                if ticket in self._waiting:  # gave up, or an error: take no place
                    self._waiting.remove(ticket)
                    self._condition.notify_all()

    def _wait_for(self, ticket: _Ticket) -> float:
        """Seconds this ticket must still wait (0: its turn), judged under the lock."""
        if sum(self._running.values()) >= self.total:
            return POLL_SECONDS
        turn = next((t for t in self._waiting if self._has_room(t.level)), None)
        if turn is not ticket:
            return POLL_SECONDS
        return max(0.0, self._last_start + self.spacing - time.monotonic())

    def _has_room(self, level: str) -> bool:
        cap = self.per_level.get(level)
        return cap is None or self._running[level] < cap

    def release(self, level: str) -> None:
        with self._condition:
            self._running[level] -= 1
            self._condition.notify_all()

    def running(self) -> int:
        with self._condition:
            return sum(self._running.values())
