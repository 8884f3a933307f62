"""Places for ticks: priorities, FIFO, per-level caps, cancellation without leaks, spacing."""

from __future__ import annotations

import itertools
import threading
import time

from harness.gate import Gate


def start_waiter(
    gate: Gate,
    level: str,
    priority: int,
    order: list[str],
    name: str,
    gave_up: threading.Event | None = None,
) -> threading.Thread:
    stop = gave_up or threading.Event()

    def wait() -> None:
        if gate.acquire(level, priority, stop.is_set):
            order.append(name)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.05)  # queue in a known order
    return thread


def test_lower_priority_number_first_then_first_come_first_served() -> None:
    gate = Gate(total=1, per_level={})
    assert gate.acquire("x", 0, lambda: False)
    order: list[str] = []
    waiters = [
        start_waiter(gate, "x", priority, order, name)
        for name, priority in [("late-5a", 5), ("urgent-1a", 1), ("late-5b", 5), ("urgent-1b", 1)]
    ]
    for _ in waiters:
        gate.release("x")
        time.sleep(0.3)
    for waiter in waiters:
        waiter.join(2)
    assert order == ["urgent-1a", "urgent-1b", "late-5a", "late-5b"]


def test_a_level_at_its_cap_does_not_hold_up_others() -> None:
    gate = Gate(total=2, per_level={"a": 1})
    assert gate.acquire("a", 0, lambda: False)
    order: list[str] = []
    blocked = start_waiter(gate, "a", 0, order, "a2")
    other = start_waiter(gate, "b", 5, order, "b1")
    other.join(2)
    assert order == ["b1"]
    gate.release("a")
    blocked.join(2)
    assert order == ["b1", "a2"]


def test_a_waiter_that_gives_up_takes_no_place() -> None:
    gate = Gate(total=1, per_level={})
    assert gate.acquire("x", 0, lambda: False)
    order: list[str] = []
    cancel = threading.Event()
    quitter = start_waiter(gate, "x", 0, order, "quitter", cancel)
    stayer = start_waiter(gate, "x", 9, order, "stayer")
    cancel.set()
    quitter.join(2)
    gate.release("x")
    stayer.join(2)
    assert order == ["stayer"]
    gate.release("x")
    assert gate.running() == 0
    assert gate.acquire("x", 0, lambda: False), "the cancelled waiter leaked a place"


def test_starts_are_spaced() -> None:
    gate = Gate(total=10, per_level={}, spacing=0.2)
    times = []
    for _ in range(4):
        assert gate.acquire("x", 0, lambda: False)
        times.append(time.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.19
