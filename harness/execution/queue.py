"""The queue of ticks waiting for a place: a global cap, per-level caps, priorities, spacing.

Queued ticks are plain items, not blocked threads: a wave of a thousand slots at :00
must cost the scheduler a list insertion each, not a thread that wakes up to look. One
dispatcher `take`s the next item allowed to start, lowest priority number first and first
come first served within a priority; an item whose level is at its own cap does not hold
up those behind it. `withdraw` removes queued items (a cancel) without their ever taking
a place, so nothing leaks. Consecutive starts are at least `spacing` seconds apart, so a
wave does not spawn every worker in the same instant; after an infrastructure failure
`throttle` widens that spacing to the failure's backoff for a while, for every level at
once (the predecessor's global throttle): an outage is not hammered by the whole queue.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(order=True)
class _Ticket(Generic[T]):
    priority: int
    sequence: int
    level: str = field(compare=False)
    item: T = field(compare=False)


class Gate(Generic[T]):
    """Gives queued items a place within global and per-level caps, by priority, spaced apart."""

    def __init__(self, total: int, per_level: dict[str, int | None], spacing: float = 0.0):
        self.total = total
        self.per_level = per_level
        self.spacing = spacing
        self._condition = threading.Condition()
        self._waiting: list[_Ticket[T]] = []
        self._running: Counter[str] = Counter()
        self._last_start = float("-inf")
        self._throttle = 0.0
        self._throttle_until = float("-inf")
        self._sequence = itertools.count()
        self._closed = False

    def set_caps(self, per_level: dict[str, int | None]) -> None:
        """New per-level caps (a reload); items waiting are looked at again under them."""
        with self._condition:
            self.per_level = per_level
            self._condition.notify_all()

    def put(self, level: str, priority: int, item: T) -> bool:
        """Queue an item; False (not queued) once the gate is closed."""
        with self._condition:
            if self._closed:
                return False
            bisect.insort(self._waiting, _Ticket(priority, next(self._sequence), level, item))
            self._condition.notify_all()
            return True

    def take(self) -> tuple[str, T] | None:
        """Wait for the next item allowed to start and give it a place; None once closed."""
        with self._condition:
            while not self._closed:
                ticket = self._next()
                if ticket is None:
                    self._condition.wait()
                    continue
                pause = self._last_start + self._spacing() - time.monotonic()
                if pause > 0:
                    self._condition.wait(pause)
                    continue
                self._waiting.remove(ticket)
                self._running[ticket.level] += 1
                self._last_start = time.monotonic()
                return ticket.level, ticket.item
            return None

    def _spacing(self) -> float:
        if time.monotonic() < self._throttle_until:
            return max(self.spacing, self._throttle)
        return self.spacing

    def throttle(self, spacing: float, duration: float) -> None:
        """Space every start at least `spacing` apart, from now on for `duration` seconds.

        The next start waits `spacing` from now. A wider spacing or a later end already in
        force is kept: overlapping outages slow the queue by the worst one.
        """
        with self._condition:
            now = time.monotonic()
            if now >= self._throttle_until:
                self._throttle = 0.0
            self._throttle = max(self._throttle, spacing)
            self._throttle_until = max(self._throttle_until, now + duration)
            self._last_start = max(self._last_start, now)
            self._condition.notify_all()

    def _next(self) -> _Ticket[T] | None:
        if sum(self._running.values()) >= self.total:
            return None
        return next((t for t in self._waiting if self._has_room(t.level)), None)

    def _has_room(self, level: str, places: int = 1) -> bool:
        cap = self.per_level.get(level)
        return cap is None or self._running[level] + places <= cap

    def enter(self, level: str, stopped: threading.Event, places: int = 1) -> bool:
        """Take `places` places for `level` at once as soon as the caps allow, ahead of the queue.

        For a hedge's twin: its tick already waited its turn and stalled, so the twin does
        not queue behind later slots; for a procrastinate job, every place its tick may
        need. False (no place taken) once the gate closes or `stopped` is set.
        """
        with self._condition:
            while not self._closed and not stopped.is_set():
                if sum(self._running.values()) + places <= self.total and self._has_room(
                    level, places
                ):
                    self._running[level] += places
                    return True
                self._condition.wait(0.1)
            return False

    def release(self, level: str, places: int = 1) -> None:
        """Give back places of a finished item of `level`; waiting items are woken."""
        with self._condition:
            self._running[level] -= places
            self._condition.notify_all()

    def withdraw(self, matches: Callable[[T], bool]) -> list[T]:
        """Take matching items out of the queue; they never get a place."""
        with self._condition:
            kept: list[_Ticket[T]] = []
            gone: list[_Ticket[T]] = []
            for ticket in self._waiting:
                (gone if matches(ticket.item) else kept).append(ticket)
            self._waiting = kept
            self._condition.notify_all()
        return [t.item for t in gone]

    def close(self) -> list[T]:
        """Hand out no more places; returns what was still queued, in queue order."""
        with self._condition:
            self._closed = True
            left = [t.item for t in self._waiting]
            self._waiting = []
            self._condition.notify_all()
        return left

    def queued(self) -> list[T]:
        """The items waiting for a place, for status and withdrawal."""
        with self._condition:
            return [t.item for t in self._waiting]

    def running(self) -> int:
        """How many items hold a place now."""
        with self._condition:
            return sum(self._running.values())
