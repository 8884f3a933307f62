"""Many processes append at once; a concurrent reader must never skip a committed event."""

from __future__ import annotations

import multiprocessing
import time
from collections import defaultdict

import pytest

from harness.store import open_store
from tests.procs import append_many, claim

WRITERS = 4
PER_WRITER = 400


def test_concurrent_writers_and_a_polling_reader_see_every_event(store_url: str) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    writers = [
        context.Process(target=append_many, args=(store_url, w, PER_WRITER, start))
        for w in range(WRITERS)
    ]
    for process in writers:
        process.start()
    reader = open_store(store_url)
    seen: list[int] = []
    start.set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        batch = reader.read_all(seen[-1] if seen else 0, limit=500)
        seen.extend(event.global_position for event in batch)
        if not batch and not any(process.is_alive() for process in writers):
            batch = reader.read_all(seen[-1] if seen else 0, limit=100_000)
            seen.extend(event.global_position for event in batch)
            break
    for process in writers:
        process.join(10)
        assert process.exitcode == 0, "a writer failed (for SQLite: 'database is locked'?)"

    everything = reader.read_all(0, limit=100_000)
    reader.close()
    assert len(everything) == WRITERS * PER_WRITER
    assert seen == [event.global_position for event in everything], "the reader skipped events"

    per_stream: dict[str, list[int]] = defaultdict(list)
    for event in everything:
        per_stream[event.stream_id].append(event.stream_position)
    for positions in per_stream.values():
        assert positions == list(range(1, len(positions) + 1))


@pytest.mark.parametrize("contenders", [6])
def test_exactly_one_process_creates_a_stream(store_url: str, contenders: int) -> None:
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(target=claim, args=(store_url, "slot-min-0900", start, results))
        for _ in range(contenders)
    ]
    for process in processes:
        process.start()
    start.set()
    outcomes = sorted(results.get(timeout=60) for _ in processes)
    for process in processes:
        process.join(10)
    assert outcomes == ["lost"] * (contenders - 1) + ["won"]
    store = open_store(store_url)
    assert len(store.read_stream("slot-min-0900")) == 1
    store.close()
