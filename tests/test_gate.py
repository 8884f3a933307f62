"""The queue of ticks: priorities, FIFO, per-level caps, withdrawal without leaks, spacing."""

from __future__ import annotations

import itertools
import threading
import time

from harness.execution.queue import Gate
from tests.waiting import wait_until


def take_in_background(gate: Gate[str]) -> tuple[threading.Thread, list[str | None]]:
    """A thread blocked in `take` (CPython's Condition lists the threads waiting on it)."""
    taken: list[str | None] = []

    def take() -> None:
        got = gate.take()
        taken.append(None if got is None else got[1])

    thread = threading.Thread(target=take)
    thread.start()
    waiters = gate._condition._waiters
    wait_until(lambda: len(waiters) == 1, "the taker to wait on the gate")
    return thread, taken


def test_lower_priority_number_first_then_first_come_first_served() -> None:
    gate: Gate[str] = Gate(total=1, per_level={})
    for name, priority in [("late-5a", 5), ("urgent-1a", 1), ("late-5b", 5), ("urgent-1b", 1)]:
        gate.put("x", priority, name)
    order = []
    for _ in range(4):
        got = gate.take()
        assert got is not None
        order.append(got[1])
        gate.release("x")
    assert order == ["urgent-1a", "urgent-1b", "late-5a", "late-5b"]


def test_take_waits_for_a_place_and_a_full_level_does_not_hold_up_others() -> None:
    gate: Gate[str] = Gate(total=2, per_level={"a": 1})
    gate.put("a", 0, "a1")
    gate.put("a", 0, "a2")
    gate.put("b", 5, "b1")
    assert gate.take() == ("a", "a1")
    assert gate.take() == ("b", "b1"), "a2 (its level at its cap) held up b1"
    thread, taken = take_in_background(gate)
    assert taken == [], "a place was handed out over the global cap"
    gate.release("a")
    thread.join(60)
    assert taken == ["a2"]


def test_a_withdrawn_item_takes_no_place() -> None:
    gate: Gate[str] = Gate(total=1, per_level={})
    gate.put("x", 0, "running")
    assert gate.take() == ("x", "running")
    gate.put("x", 0, "quitter")
    gate.put("x", 9, "stayer")
    assert gate.withdraw(lambda item: item == "quitter") == ["quitter"]
    assert gate.queued() == ["stayer"]
    gate.release("x")
    assert gate.take() == ("x", "stayer")
    gate.release("x")
    assert gate.running() == 0


def test_close_wakes_the_taker_and_returns_what_was_queued() -> None:
    gate: Gate[str] = Gate(total=1, per_level={})
    gate.put("x", 0, "running")
    assert gate.take() is not None
    gate.put("x", 0, "queued")
    thread, taken = take_in_background(gate)
    assert gate.close() == ["queued"]
    thread.join(60)
    assert taken == [None] and gate.queued() == []


def test_starts_are_spaced() -> None:
    gate: Gate[str] = Gate(total=10, per_level={}, spacing=0.2)
    for i in range(4):
        gate.put("x", 0, str(i))
    times = []
    for _ in range(4):
        assert gate.take() is not None
        times.append(time.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.19


def test_places_taken_at_once_wait_until_all_are_free() -> None:
    """A procrastinate job takes every place its tick may need in one go, never a part."""
    gate: Gate[str] = Gate(total=3, per_level={})
    stopped = threading.Event()
    assert gate.enter("duo", stopped, 2)
    entered: list[bool] = []
    thread = threading.Thread(target=lambda: entered.append(gate.enter("duo", stopped, 2)))
    thread.start()
    wait_until(lambda: gate.running() == 2 and thread.is_alive(), "the second job to wait")
    assert gate.enter("solo", stopped), "one free place is still there for a job needing one"
    gate.release("solo")
    assert gate.running() == 2 and entered == [], "two places taken while one was free"
    gate.release("duo", 2)
    thread.join(60)
    assert entered == [True] and gate.running() == 2
