"""What a schema revision adds to each append: CPU per event at two revisions, interleaved.

An index on `events` costs every append an entry. Wall time on a shared machine moves
more than that entry does, so this counts CPU: on SQLite the process's own (SQLite runs
in it), on PostgreSQL the client's plus its writer backend's (read from /proc). Single
appends and batches of 100, to a store at each revision in turn, round after round; the
median of the rounds per revision, and the difference.

    .venv/bin/python ops/bench/revision_append_bench.py [--before 0005] [--after head]
        [--rounds 7] [--pg-url postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from machine import describe
from store_bench import PAYLOAD, fresh_pg

from harness.contracts import new_event_id
from harness.store import NewEvent, SqlEventStore
from harness.store.engine import create_store_engine
from harness.store.migrate import upgrade

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def store_at(url: str, revision: str) -> SqlEventStore:
    engine = create_store_engine(url, durability="process")
    upgrade(engine, revision)
    store = SqlEventStore(engine)
    store.append("warm", [NewEvent(new_event_id(), "BudgetSpent", 1, PAYLOAD)])
    return store


def backend_cpu(store: SqlEventStore) -> float:
    """CPU seconds of the PostgreSQL backend serving the store's writer (0 on SQLite)."""
    connection = store._writer._connection  # the bench reads the writer's own backend
    if connection is None or not hasattr(connection, "info"):
        return 0.0
    stat = Path(f"/proc/{connection.info.backend_pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_per_event(store: SqlEventStore, events: int, batch: int, tag: str) -> float:
    """Microseconds of CPU per event over `events` appends of `batch`."""
    process, backend = time.process_time(), backend_cpu(store)
    for i in range(events // batch):
        store.append(
            f"s-{tag}-{i % 500}",
            [NewEvent(new_event_id(), "BudgetSpent", 1, PAYLOAD) for _ in range(batch)],
        )
    used = time.process_time() - process + backend_cpu(store) - backend
    return used / events * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="0005")
    parser.add_argument("--after", default="head")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    revisions = (args.before, args.after)
    with tempfile.TemporaryDirectory() as folder:
        urls = {
            "SQLite": lambda revision: f"sqlite:///{folder}/{revision}.db",
            "PostgreSQL": lambda revision: fresh_pg(args.pg_url, f"bench_revision_{revision}"),
        }
        for backend, url in urls.items():
            stores = {revision: store_at(url(revision), revision) for revision in revisions}
            for batch, events in ((1, 4000), (100, 40000)):
                figures: dict[str, list[float]] = {revision: [] for revision in revisions}
                for n in range(args.rounds):
                    for revision in revisions if n % 2 == 0 else revisions[::-1]:
                        tag = f"{batch}-{n}"
                        figures[revision].append(
                            cpu_per_event(stores[revision], events, batch, tag)
                        )
                before, after = (statistics.median(figures[r]) for r in revisions)
                print(
                    f"{backend} appends of {batch:>3}: CPU per event {before:.1f} us at "
                    f"{args.before}, {after:.1f} us at {args.after}: "
                    f"{(after / before - 1) * 100:+.1f} %",
                    flush=True,
                )
            for store in stores.values():
                store.close()
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
