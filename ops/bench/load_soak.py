"""The load soak: 720 slots a minute (60 levels every 5 s) for minutes, on both stores.

Each run is `tickwork run` with `[runner] max_concurrent = 16`, `start_spacing_seconds =
0`, the fake upstream answering every call in 0.2 s: on SQLite, on PostgreSQL, and on
PostgreSQL through the procrastinate executor (`tickwork run` and two `tickwork worker
--concurrency 8`). After `--seconds` the scheduler gets SIGTERM (running ticks finish
within their grace; the workers first run the jobs still queued, then get it too), and
the store is read back. Printed per run: ticks completed a
minute while it ran, every tick ended once, spend against the fake's bill, the RSS of
each process a fifth of the way in and at the end (its growth), the connections to the
database at peak (PostgreSQL), and any `Exception in thread` or traceback in the output.

CPU a tick decides the rate, not the wall clock: the server shares the machine's cores
with the service and its tick processes. Printed per completed tick while it ran: CPU
milliseconds of `tickwork run` with every process under it (tick processes, the fork
server), of the workers likewise, and of the PostgreSQL server (every backend, so on a
server other databases use too it counts theirs), and the database's sessions opened
and transactions (`pg_stat_database`).

    .venv/bin/python ops/bench/load_soak.py [--seconds 300] [--runs sqlite,postgresql,procrastinate]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg
from machine import describe
from procrastinate_bench import database

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.devtools.fake_llm import FakeUpstream
from harness.store import SqlEventStore, conninfo, migrate_store, open_store
from tests.commands import Output, forked_cli
from tests.load_support import LEVELS, Load, answer_slowly, load_config
from tests.procrastinate_support import Ticks, processes
from tests.waiting import wait_until

RUNS = ("sqlite", "postgresql", "procrastinate")


@contextmanager
def peak_connections(url: str | None) -> Iterator[list[int]]:
    """The most sessions the database had at once while the block ran (PostgreSQL)."""
    peak = [0]
    if url is None:
        yield peak
        return
    stop = threading.Event()
    query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"

    def watch() -> None:
        with psycopg.connect(conninfo(url), autocommit=True) as conn:
            while not stop.wait(0.25):
                row = conn.execute(query).fetchone()
                peak[0] = max(peak[0], (row[0] if row else 0) - 1)  # not this watcher

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield peak
    finally:
        stop.set()
        watcher.join()


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and all under it, the children it has reaped included."""
    root = psutil.Process(pid)
    total = 0.0
    for each in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = each.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


@dataclass(frozen=True)
class Usage:
    """What the run had used by a moment: CPU seconds per process tree, database counters."""

    completed: int
    cpu: dict[str, float]
    service: float
    """CPU seconds of `tickwork run` itself, its tick processes not counted."""
    sessions: int
    transactions: int

    @classmethod
    def read(
        cls, store: SqlEventStore, fake: FakeUpstream, trees: dict[str, int], url: str | None
    ) -> Usage:
        completed = Load.read(store, fake).completed
        cpu = {name: tree_cpu(pid) for name, pid in trees.items()}
        own = psutil.Process(trees["run"]).cpu_times()
        service = own.user + own.system
        if url is None:
            return cls(completed, cpu, service, 0, 0)
        query = (
            "SELECT sessions, xact_commit + xact_rollback, pg_backend_pid() "
            "FROM pg_stat_database WHERE datname = current_database()"
        )
        with psycopg.connect(conninfo(url), autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(query).fetchone()
            assert row is not None
            cpu["postgresql"] = tree_cpu(psutil.Process(row[2]).ppid())  # the postmaster
        return cls(completed, cpu, service, row[0], row[1])

    def per_tick(self, before: Usage) -> str:
        ticks = max(1, self.completed - before.completed)
        cpu = ", ".join(
            f"{name} {1000 * (self.cpu[name] - before.cpu[name]) / ticks:.0f}" for name in self.cpu
        )
        total = 1000 * (sum(self.cpu.values()) - sum(before.cpu.values())) / ticks
        service = 1000 * (self.service - before.service) / ticks
        line = f"  CPU ms a tick:              {total:.0f} ({cpu}; run itself {service:.0f})"
        if self.transactions:
            line += (
                f"\n  a tick's sessions, xacts:   {(self.sessions - before.sessions) / ticks:.2f}, "
                f"{(self.transactions - before.transactions) / ticks:.1f}"
            )
        return line


def rss_mib(output: Output) -> float:
    return psutil.Process(output.process.pid).memory_info().rss / 2**20


def soak(kind: str, seconds: int, url: str | None) -> None:
    """One run of `kind`, against a fake upstream of its own (its bill); prints its figures."""
    fake = FakeUpstream().start()
    answer_slowly(fake, 20 * LEVELS * seconds)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        config = load_config(root, url or "", procrastinate=kind == "procrastinate")
        if kind == "procrastinate":
            migrated = forked_cli("migrate", config, fake)
            assert migrated.returncode == 0, migrated.stderr
        elif url is not None:
            migrate_store(url)
        store = open_store(url or f"sqlite:///{root}/events.db")
        workers = 2 if kind == "procrastinate" else 0
        with (
            peak_connections(url) as peak,
            processes(config, fake, workers, concurrency=8, workers_first=True) as (service, pool),
        ):
            assert service is not None
            everyone = [service, *pool]
            began = time.monotonic()
            trees = {"run": service.process.pid} | {
                f"worker {i}": worker.process.pid for i, worker in enumerate(pool)
            }
            first = Usage.read(store, fake, trees, url)
            time.sleep(seconds / 5)
            early = [rss_mib(p) for p in everyone]
            time.sleep(seconds - (time.monotonic() - began))
            late = [rss_mib(p) for p in everyone]
            last = Usage.read(store, fake, trees, url)
            completed = last.completed
            ran = time.monotonic() - began
            texts = [service.stop()]
            # The jobs the scheduler deferred wait in the queue: the workers run them all.
            wait_until(lambda: Load.read(store, fake).unended == 0, "the queue drained", 900, 1)
            texts += [worker.stop() for worker in pool]
        load = Load.read(store, fake)
        taken = Ticks.read(store).of("TickTaken")
        store.close()
    fake.stop()
    pids = Counter(e.data["worker_pid"] for events in taken.values() for e in events)
    split = [pids.get(worker.process.pid, 0) for worker in pool]
    output = "".join(texts)
    print(f"{kind}: {seconds} s, {LEVELS} levels every 5 s (720 slots a minute)")
    print(f"  ticks completed a minute:   {completed / ran * 60:.0f} ({completed} in {ran:.0f} s)")
    print(f"  ended exactly once:         {load.ended_once} of {load.ticks} ({load.unended} open)")
    print(f"  spend against the bill:     {load.spent_tokens} / {load.billed_tokens} tokens")
    for name, before, after in zip(["run"] + ["worker"] * workers, early, late, strict=True):
        print(
            f"  RSS of {name:<6}              {before:.0f} -> {after:.0f} MiB "
            f"({100 * (after - before) / before:+.0f} %)"
        )
    print(last.per_tick(first))
    if url is not None:
        print(f"  connections at peak:        {peak[0]}")
    if split:
        print(f"  ticks taken per worker:     {', '.join(map(str, split))}")
    print(
        f"  'Exception in thread': {output.count('Exception in thread')}, "
        f"tracebacks: {output.count('Traceback')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--runs", default=",".join(RUNS))
    arguments = parser.parse_args()
    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for kind in arguments.runs.split(","):
        if kind == "sqlite":
            soak(kind, arguments.seconds, None)
            continue
        with database() as url:
            soak(kind, arguments.seconds, url)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
