"""Fold-chunk benchmark: a sum read model's rebuild at each `FOLD_CHUNK`, time and peak RSS.

A fold in parts holds the sums of a chunk of events before it writes them with its
checkpoint (`harness.projections.projector`). This loads synthetic history (the growth
benchmark's loader, 1,000 levels) into a PostgreSQL database made afresh, then rebuilds
`tick_spend` (keyed per tick: the largest sums) and `spend` once per chunk size, each in
a process of its own, and prints the wall clock, the rebuild's own peak RSS and its and
its fold workers' together. A chunk of 0 folds the whole backlog at once (as before).

    .venv/bin/python ops/bench/fold_chunk_bench.py [--events 2000000]
        [--chunks 0,2000000,1000000,500000,200000]
        [--pg-url postgresql://postgres@127.0.0.1:5432/test] [--pg-database bench_fold_chunk]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from growth_bench import drop_pg, fresh_store, write_config
from history_loader import Span, load
from machine import describe, tree_peaks_mib

CHILD = """
import sys
from pathlib import Path
from harness.config import load_settings
from harness.prices import PriceBook
from harness.projections import projector as module
from harness.projections import projector_for
from harness.store import open_store, positions_kept

settings = load_settings(Path(sys.argv[1]))
chunk = int(sys.argv[2])
module.FOLD_CHUNK = chunk or 2**62
store = open_store(settings.store.url)
projector = projector_for(store, PriceBook(settings.prices))
with positions_kept():
    for name in ("tick_spend", "spend"):
        projector.rebuild(name)
print(projector.spawned)
store.close()
"""


def rebuild(config: Path, chunk: int) -> tuple[float, int, float, float]:
    """Seconds, worker processes started, own peak RSS and tree peak RSS (MiB)."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as said, tempfile.TemporaryFile() as out:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(config), str(chunk)], stdout=out, stderr=said
        )
        own, tree = tree_peaks_mib(child)
        if child.returncode != 0:
            said.seek(0)
            raise RuntimeError(f"rebuild failed: {said.read().decode()[-2000:]}")
        out.seek(0)
        spawned = int(out.read())
    return time.perf_counter() - began, spawned, own, tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--chunks", default="0,2000000,1000000,500000,200000")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--pg-database", default="bench_fold_chunk")
    args = parser.parse_args()
    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    url = fresh_store("postgresql", Path(), args.pg_url, args.pg_database)
    try:
        with tempfile.TemporaryDirectory() as folder:
            config = write_config(Path(folder), url)
            span = Span.of_events(args.events, datetime.now(UTC))
            began = time.perf_counter()
            load(url, span, packing=True)
            print(
                f"{args.events:,} events ({span.ticks:,} ticks) loaded in "
                f"{time.perf_counter() - began:.0f} s",
                flush=True,
            )
            print(
                f"{'chunk (events)':>15}{'rebuild tick_spend + spend (s)':>32}{'workers':>9}"
                f"{'own peak (MiB)':>16}{'with workers (MiB)':>20}"
            )
            for chunk in (int(each) for each in args.chunks.split(",")):
                seconds, spawned, own, tree = rebuild(config, chunk)
                shown = f"{chunk:,}" if chunk else "whole"
                print(
                    f"{shown:>15}{seconds:>32.1f}{spawned:>9}{own:>16.0f}{tree:>20.0f}", flush=True
                )
    finally:
        drop_pg(args.pg_url, args.pg_database)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
