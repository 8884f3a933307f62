"""Functions run in child processes by the concurrency tests, and how those are started."""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.context import ForkProcess
from multiprocessing.synchronize import Event
from typing import Any
from uuid import uuid4

from harness.store import ANY, NO_STREAM, ConcurrencyError, NewEvent, open_store

CONTEXT = multiprocessing.get_context("fork")
"""Racers are forked from the warm test process, each a process of its own that opens its
own store: a spawned one spends a second of imports before it races."""


@contextmanager
def racing(target: Callable[..., None], *arguments: tuple[Any, ...]) -> Iterator[list[ForkProcess]]:
    """Fork one process per argument tuple and release them together.

    The start event is passed as each target's last argument; on leaving the block every
    process must have finished with exit code 0.
    """
    start = CONTEXT.Event()
    processes = [CONTEXT.Process(target=target, args=(*args, start)) for args in arguments]
    for process in processes:
        process.start()
    start.set()
    yield processes
    for process in processes:
        process.join(120)
        assert process.exitcode == 0, (
            f"{target.__name__}{process.name} ended with {process.exitcode}"
        )


def gather(results: Any, processes: list[ForkProcess], count: int) -> list[Any]:
    """Take `count` answers, failing at once (with the exit code) when a racer died silent.

    A racer that raised never answers; waiting out a long timeout for it would hide why.
    """
    answers: list[Any] = []
    deadline = time.monotonic() + 300  # guards a hang only
    while len(answers) < count:
        try:
            answers.append(results.get(timeout=0.5))
        except queue.Empty:
            dead = [p for p in processes if p.exitcode not in (None, 0)]
            assert not dead, f"racers died: {[(p.name, p.exitcode) for p in dead]}"
            assert time.monotonic() < deadline, f"only {len(answers)} of {count} answers"
    return answers


def append_many(url: str, writer: int, count: int, start: Event) -> None:
    """Single-event transactional appends, as ticks make them."""
    store = open_store(url)
    start.wait()
    for i in range(count):
        event = NewEvent(uuid4(), "Load", 1, {"writer": writer, "i": i})
        store.append(f"w{writer}-s{i % 7}", [event], ANY)
    store.close()


def claim(url: str, stream: str, results: Any, start: Event) -> None:
    """Race to create one stream; exactly one process may win."""
    store = open_store(url)
    start.wait()
    try:
        store.append(stream, [NewEvent(uuid4(), "Claimed", 1, {})], NO_STREAM)
        results.put("won")
    except ConcurrencyError:
        results.put("lost")
    finally:
        store.close()


def claim_wave(url: str, streams: list[str], results: Any, start: Event) -> None:
    """Race another process to create a whole set of streams in one call."""
    store = open_store(url)
    start.wait()
    try:
        won = store.create_streams({s: [NewEvent(uuid4(), "Claimed", 1, {})] for s in streams})
        results.put(sorted(won))
    finally:
        store.close()


def spool_many(directory: str, count: int, start: Event) -> None:
    """Spool appends one by one, as a tick does while the store is down."""
    from pathlib import Path

    from harness.store import Spool

    spool = Spool(Path(directory))
    start.wait()
    for i in range(count):
        spool.write(f"tick-{i}", [NewEvent(uuid4(), "BudgetSpent", 1, {"i": i})])


def catch_up(url: str, start: Event) -> None:
    """Fold projections in small batches, racing another process doing the same."""
    from harness.prices import PriceBook
    from harness.projections import SpendProjection, TicksProjection
    from harness.projections.projector import Projector

    store = open_store(url)
    projector = Projector(store, [SpendProjection(PriceBook()), TicksProjection()], batch_size=7)
    start.wait()
    projector.catch_up()
    store.close()


def open_fresh(url: str, start: Event) -> None:
    """Open (and so migrate) a store that several processes open for the first time at once."""
    start.wait()
    store = open_store(url)
    store.append("opened", [NewEvent(uuid4(), "Opened", 1, {})])
    store.close()
