"""`tickwork run`'s memory at 1,000 levels: its peak RSS, and what holds it.

Issue 24's goal is a service within 200 MiB at 1,000 levels. This runs `tickwork run` (the
service process; its fork server and ticks are processes of their own, not counted) on a
copy of a kept store (`metrics_bench.py --store FOLDER` loads one) with the fake upstream,
for `--seconds`, and samples the service from inside twice a second: RSS, SQLite's heap
(`sqlite3_memory_used`: page caches, statements, schemas) with its high-water mark,
glibc's heap (`mallinfo2`: bytes in use, and free bytes it holds), and threads. The
samples go to a file the service writes; this prints the peak and a timeline beside the
service's own lines, so each rise can be put to its phase (imports, start-up's catch-up
of the slots missed since the store was written, waves, ticks).

    .venv/bin/python ops/bench/run_memory.py --store FOLDER [--seconds 120]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from growth_bench import write_config
from machine import describe

from harness.devtools.fake_llm import fake_upstream

SAMPLE_SECONDS = 0.5
STOP_SECONDS = 900
"""The service cancels what it queued and records it before it ends: minutes at load 30."""


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _sampler(out: Path) -> None:
    """In the service: a line of figures every half second (MiB), to `out`."""
    sqlite = ctypes.CDLL(ctypes.util.find_library("sqlite3") or "libsqlite3.so.0")
    sqlite.sqlite3_memory_used.restype = ctypes.c_int64
    sqlite.sqlite3_memory_highwater.restype = ctypes.c_int64
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    page = os.sysconf("SC_PAGE_SIZE")
    began = time.monotonic()
    with out.open("a") as sink:
        while True:
            rss = int(Path("/proc/self/statm").read_text().split()[1]) * page
            heap = libc.mallinfo2()
            figures = {
                "t": round(time.monotonic() - began, 1),
                "rss": rss,
                "sqlite": sqlite.sqlite3_memory_used(),
                "sqlite_peak": sqlite.sqlite3_memory_highwater(0),
                "malloc_used": heap.uordblks + heap.hblkhd,
                "malloc_free": heap.fordblks,
                "threads": threading.active_count(),
            }
            sink.write(json.dumps(figures) + "\n")
            sink.flush()
            time.sleep(SAMPLE_SECONDS)


def serve(config: str, samples: str, read_kib: str, writer_kib: str) -> None:
    """The service process: the sampler thread, then `tickwork -c CONFIG run`.

    `read_kib`, `writer_kib` (not "-"): SQLite's page caches of pooled connections and of
    the writer's, in place of the store's.
    """
    threading.Thread(target=_sampler, args=(Path(samples),), daemon=True).start()
    from harness.cli import main as tickwork
    from harness.store import engine, writer

    if read_kib != "-":
        engine.SQLITE_READ_CACHE_KIB = int(read_kib)
    if writer_kib != "-":
        writer.SQLITE_CACHE_KIB = int(writer_kib)
    sys.argv = ["tickwork", "-c", config, "run"]
    tickwork()


def run(store: Path, seconds: int, scratch: Path, caches: list[str]) -> None:
    """Copy the kept store, run the service on it, print what the samples say."""
    name = "metrics.db" if (store / "metrics.db").exists() else "events.db"
    for part in store.glob(f"{name}*"):
        shutil.copy2(part, scratch / part.name)
    config = write_config(scratch, f"sqlite:///{scratch}/{name}")
    samples, log = scratch / "samples.jsonl", scratch / "service.log"
    with fake_upstream() as fake, log.open("w") as output:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
        env["OPENAI_BASE_URL"] = fake.url
        service = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(config), str(samples), *caches],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).parent,
        )
        time.sleep(seconds)
        service.send_signal(signal.SIGTERM)
        stopping = time.monotonic()
        service.wait(STOP_SECONDS)
        stopped = time.monotonic() - stopping
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    mib = 2**20
    peak = max(rows, key=lambda row: row["rss"])
    print(
        f"peak RSS {peak['rss'] / mib:.1f} MiB at {peak['t']} s: SQLite heap "
        f"{peak['sqlite'] / mib:.1f} MiB (its high-water {peak['sqlite_peak'] / mib:.1f}), "
        f"malloc in use {peak['malloc_used'] / mib:.1f} MiB, malloc free "
        f"{peak['malloc_free'] / mib:.1f} MiB, {peak['threads']} threads; "
        f"stopped {stopped:.0f} s after SIGTERM"
    )
    print(f"  {'t (s)':>6}{'RSS':>8}{'SQLite':>8}{'malloc':>8}{'free':>8}{'threads':>8}")
    shown = [row for row in rows if row["t"] < 30][:: round(1 / SAMPLE_SECONDS)]
    for row in shown + [row for row in rows if row["t"] >= 30][:: round(5 / SAMPLE_SECONDS)]:
        print(
            f"  {row['t']:>6}{row['rss'] / mib:>8.1f}{row['sqlite'] / mib:>8.1f}"
            f"{row['malloc_used'] / mib:>8.1f}{row['malloc_free'] / mib:>8.1f}{row['threads']:>8}"
        )
    print("service lines, but those of single slots and ticks:")
    for line in log.read_text().splitlines():
        if not re.match(r"\d\d:\d\d:\d\d l\d{4}", line):
            print(f"  {line}")


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(*sys.argv[2:6])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store",
        type=Path,
        required=True,
        help="a metrics_bench --store folder, or a growth_bench --keep one's sqlite-SIZE",
    )
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument(
        "--read-cache-kib", type=int, help="SQLite's page cache of a pooled connection"
    )
    parser.add_argument("--writer-cache-kib", type=int, help="SQLite's page cache of the writer")
    args = parser.parse_args()
    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as folder:
        caches = [str(kib or "-") for kib in (args.read_cache_kib, args.writer_cache_kib)]
        run(args.store, args.seconds, Path(folder), caches)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
