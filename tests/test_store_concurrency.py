"""Many processes append at once; a concurrent reader must never skip a committed event."""

from __future__ import annotations

import multiprocessing
from collections import defaultdict

from harness.store import open_store
from tests.procs import append_many, claim, claim_wave, racing

WRITERS = 4
PER_WRITER = 400


def test_concurrent_writers_and_a_polling_reader_see_every_event(store_url: str) -> None:
    reader = open_store(store_url)
    seen: list[int] = []
    writers = [(store_url, w, PER_WRITER) for w in range(WRITERS)]
    with racing(append_many, *writers) as processes:
        while True:
            running = any(process.is_alive() for process in processes)
            batch = reader.read_all(seen[-1] if seen else 0, limit=500)
            seen.extend(event.global_position for event in batch)
            if not batch and not running:
                break

    everything = reader.read_all(0, limit=100_000)
    reader.close()
    assert len(everything) == WRITERS * PER_WRITER
    assert seen == [event.global_position for event in everything], "the reader skipped events"

    per_stream: dict[str, list[int]] = defaultdict(list)
    for event in everything:
        per_stream[event.stream_id].append(event.stream_position)
    for positions in per_stream.values():
        assert positions == list(range(1, len(positions) + 1))


def test_exactly_one_process_creates_a_stream(store_url: str) -> None:
    results = multiprocessing.get_context("spawn").Queue()
    with racing(claim, *[(store_url, "slot-min-0900", results)] * 6):
        outcomes = sorted(results.get(timeout=60) for _ in range(6))
    assert outcomes == ["lost"] * 5 + ["won"]
    store = open_store(store_url)
    assert len(store.read_stream("slot-min-0900")) == 1
    store.close()


def test_replicas_claiming_a_wave_together_split_it_without_overlap(store_url: str) -> None:
    results = multiprocessing.get_context("spawn").Queue()
    streams = [f"tick-l{i:03d}-0900" for i in range(300)]
    waves = [streams, streams[::-1], streams[100:] + streams[:100]]
    with racing(claim_wave, *[(store_url, wave, results) for wave in waves]):
        won = [results.get(timeout=60) for _ in waves]
    assert sorted(s for claimed in won for s in claimed) == sorted(streams)
    store = open_store(store_url)
    assert all(len(events) == 1 for events in store.read_streams(streams).values())
    store.close()
