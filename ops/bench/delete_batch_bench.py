"""Where an archive run's delete of a day spends its time, one part of a batch at a time.

Runs the per-batch work of `Archiver._delete` (each read model's `archived`, then
`tick_rows.forget`, then the commit) over the first `--batches` batches of `--per` ticks of
the oldest day, in the archive's order (their first positions), on a copy of a prepared
SQLite store (`archive_bench.py --prepared`), and prints each part's time per tick. Not
the archive's own loop: it reads no archive file and deletes no straggling `events`,
so the parts are timed alone; compare two stores (14.4k and 144k ticks a day) or two
trees (through `PYTHONPATH`) on copies of the same store.

    .venv/bin/python ops/bench/delete_batch_bench.py PREPARED_FOLDER [--batches 20] [--per 370]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import sqlalchemy as sa
from machine import describe

from harness.prices import PriceBook
from harness.projections import projector_for
from harness.store import SqlEventStore, open_store
from harness.store.schema import tick_rows
from harness.store.tick_rows import forget


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prepared", type=Path, help="a folder holding a prepared events.db")
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--per", type=int, default=370, help="ticks a batch (5,000 events)")
    options = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as temporary:
        copy = Path(temporary) / "events.db"
        shutil.copyfile(options.prepared / "events.db", copy)
        store = open_store(f"sqlite:///{copy}")
        try:
            spent = timed_batches(store, options.batches, options.per)
        finally:
            store.close()
    ticks = options.batches * options.per
    for part, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"{part:<14} {seconds:8.3f} s  {seconds / ticks * 1000:.3f} ms a tick")


def timed_batches(store: SqlEventStore, batches: int, per: int) -> dict[str, float]:
    """Seconds each part took over the batches, and the whole batches' ("batch")."""
    projector = projector_for(store, PriceBook())
    with store.read_transaction() as conn:
        day = conn.execute(sa.select(sa.func.min(tick_rows.c.day))).scalar_one()
        query = (
            sa.select(tick_rows.c.tick_id, tick_rows.c.last_position)
            .where(tick_rows.c.day == day)
            .order_by(tick_rows.c.first_position)
            .limit(batches * per)
        )
        rows = conn.execute(query).all()
    print(f"day {day}: {len(rows):,} ticks in {batches} batches")
    spent: dict[str, float] = defaultdict(float)
    for start in range(0, len(rows), per):
        chunk = rows[start : start + per]
        ids = [tick for tick, _ in chunk]
        began = mark = time.perf_counter()
        with store.write_transaction() as conn:
            for name, projection in projector.projections.items():
                projection.archived(conn, day, ids)
                mark = _add(spent, name, mark)
            forget(conn, ids, max(last for _, last in chunk))
            mark = _add(spent, "forget", mark)
        _add(spent, "commit", mark)
        _add(spent, "batch", began)
    return spent


def _add(spent: dict[str, float], part: str, since: float) -> float:
    now = time.perf_counter()
    spent[part] += now - since
    return now


if __name__ == "__main__":
    main()
