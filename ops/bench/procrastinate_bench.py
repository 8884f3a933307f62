"""The procrastinate executor: once-each over many slots, load split, throughput, latency.

Drain runs (`--workers 1,2,3`): the given number of `tickwork worker` processes wait on a
fresh PostgreSQL database; then `--slots` slots of ten levels are claimed and deferred in
one wave, exactly as `tickwork run` claims and defers them, and the workers drain them
(real ticks, the fake upstream answering at once). Asserted: every slot claimed once,
every tick taken once, one terminal event each (TickCompleted), and with three workers
each worker's share within ±25 % of an even split. Printed: ticks completed a minute.

Latency runs: `tickwork run` with a level every two seconds (no backlog builds up) for
`--seconds`, once with the local executor and once with the procrastinate executor and
one worker; printed: slot → TickStarted (the first attempt's), median and p95. Every
worker shares the machine's cores with the others, so more workers add concurrency, not
cores.

    .venv/bin/python ops/bench/procrastinate_bench.py --slots 300 --workers 1,2,3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from machine import describe
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.config import load_settings
from harness.devtools.fake_llm import FakeUpstream
from harness.execution.executors.procrastinate import Locks, defer
from harness.scheduling.triggers import slot_tick_id
from harness.scheduling.waves import SlotClaim, claim_wave
from harness.store import migrate_store, open_store
from tests.commands import write_config
from tests.procrastinate_support import Ticks, configure, level, processes
from tests.waiting import wait_until

PG_URL = os.environ.get("TICKWORK_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
LEVELS = 10


@contextmanager
def database() -> Iterator[str]:
    """A fresh database on the PostgreSQL of `$TICKWORK_TEST_PG_URL`, dropped afterwards."""
    admin = make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"tickwork_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        url = make_url(PG_URL).set(drivername="postgresql+psycopg", database=name)
        yield url.render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drain(slots: int, workers: int, concurrency: int, fake: FakeUpstream) -> float:
    """Claim and defer `slots` ticks in one wave; returns ticks completed a minute."""
    levels = "".join(level(f"l{i}", "1h", timeout=120) for i in range(LEVELS))
    with database() as url, tempfile.TemporaryDirectory() as folder:
        config = configure(Path(folder), url, levels, fake)
        settings = load_settings(config)
        store = open_store(url)
        base = datetime(2026, 1, 1, tzinfo=UTC)
        claims = [
            SlotClaim(slot_tick_id(f"l{i % LEVELS}", at), f"l{i % LEVELS}", at)
            for i in range(slots)
            for at in [base + timedelta(hours=i // LEVELS)]
        ]
        with processes(config, fake, workers, concurrency, scheduler=False):
            began = time.monotonic()
            claimed = claim_wave(store, settings, claims)
            defer(store, settings, Locks(settings), [c for c in claims if c.tick_id in claimed])
            handed = time.monotonic() - began
            wait_until(lambda: Ticks.read(store).ended(), "every tick ended", 3600, 0.5)
            took = time.monotonic() - began
        ticks = Ticks.read(store)
        store.close()
    assert len(claimed) == slots, f"{len(claimed)} of {slots} slots claimed"
    assert len(ticks.streams) == slots
    for tick, kinds in ticks.terminals().items():
        assert kinds == ["TickCompleted"], (tick, kinds)
    taken = Counter(e.data["worker_pid"] for t in ticks.of("TickTaken").values() for e in t)
    assert sum(taken.values()) == slots, "a tick was taken twice, or not at all"
    shares = sorted(taken.values())
    even = slots / workers
    split = ", ".join(f"{share}" for share in shares)
    within = all(abs(share - even) <= 0.25 * even for share in shares) and len(shares) == workers
    print(
        f"  {workers} worker(s) x {concurrency}: {slots} ticks in {took:.1f} s "
        f"(claim + defer {handed * 1000:.0f} ms) = {slots / took * 60:.0f} ticks/min; "
        f"split {split} ({'within' if within else 'OUTSIDE'} ±25 %)"
    )
    if workers == 3:
        assert within, f"load split {shares} is not within ±25 % of {even:.0f}"
    return slots / took * 60


def latency(kind: str, seconds: int, fake: FakeUpstream) -> list[float]:
    """Slot -> TickStarted of a level firing every two seconds under `tickwork run`."""
    with database() as url, tempfile.TemporaryDirectory() as folder:
        levels = level("each", "2s", timeout=60)
        if kind == "procrastinate":
            config = configure(Path(folder), url, levels, fake)
            workers = 1
        else:
            migrate_store(url)
            config = write_config(Path(folder), levels, store_url=url)
            workers = 0
        store = open_store(url)
        with processes(config, fake, workers, concurrency=4) as (service, _):
            assert service is not None
            wait_until(lambda: len(Ticks.read(store).streams) >= seconds // 2, "slots", 600)
            service.stop()
            wait_until(lambda: Ticks.read(store).ended(), "every tick ended", 600)
        ticks = Ticks.read(store)
        store.close()
    lags = []
    for tick, started in sorted(ticks.of("TickStarted").items()):
        slot = datetime.fromisoformat(ticks.of("TickScheduled")[tick][0].data["slot"])
        if started:
            lags.append((started[0].recorded_at - slot).total_seconds())
    return lags


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=300)
    parser.add_argument("--workers", default="1,2,3")
    parser.add_argument(
        "--drain-slots", type=int, default=None, help="slots of the 1- and 2-worker runs"
    )
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=20, help="latency run length (0: none)")
    arguments = parser.parse_args()
    print(describe())
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    fake = FakeUpstream().start()
    try:
        print("drains of one wave each, fake upstream answering at once:")
        for workers in (int(n) for n in arguments.workers.split(",") if n):
            slots = arguments.slots if workers == 3 else arguments.drain_slots or arguments.slots
            drain(slots, workers, arguments.concurrency, fake)
        if arguments.seconds:
            print(f"slot -> TickStarted, a level every 2 s for {arguments.seconds} s:")
        for kind in ("local", "procrastinate") if arguments.seconds else ():
            lags = latency(kind, arguments.seconds, fake)
            ordered = sorted(lags)
            p95 = ordered[int(0.95 * (len(ordered) - 1))]
            print(
                f"  {kind:>13}: median {statistics.median(lags):.3f} s, p95 {p95:.3f} s "
                f"({len(lags)} ticks; in slot order: {', '.join(f'{lag:.1f}' for lag in lags)})"
            )
    finally:
        fake.stop()
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
