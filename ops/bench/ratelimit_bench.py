"""Shared rate limits (issue 30): a limit held across three procrastinate workers, and its cost.

Held (`--levels`, `--rpm`, `--minutes`): levels on `* * * * *` against one provider host
with `rpm` set (`[rate_limits."HOST"]`), `tickwork run` and three `tickwork worker`s on
a fresh PostgreSQL database, the fake upstream answering at once. Printed: the most
requests the fake upstream received in any 60 seconds (must be ≤ rpm), the calls refused
(429) upstream (must be 0), how the ticks ended, and the queue waits: slot → TickStarted,
and each `RateLimited` wait.

Cost (`--calls`): the added latency of one model call with three rate limits in scope (a
level's rpm, a target's tpm, a provider's max_parallel), measured around the check
before the call (`take`) and with the settle after it, on SQLite and PostgreSQL; p50 and
p99 of the wall time, and the CPU time of this process per call (PostgreSQL's own is
not in it).

    .venv/bin/python ops/bench/ratelimit_bench.py --levels 1000 --rpm 600 --minutes 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import psutil
from machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from procrastinate_bench import database

from harness.contracts import (
    ModelCalled,
    ModelCallStarted,
    RateLimited,
    TickCompleted,
    TickScheduled,
    TickStarted,
)
from harness.contracts.rate_limits import RateLimit
from harness.devtools.fake_llm import FakeUpstream
from harness.store import Call, migrate_store, open_store, settle, take
from tests.procrastinate_support import Ticks, configure, processes
from tests.waiting import wait_until
from workers.model import provider_of

WORKERS = 3
SCOPES = [
    ("level:bench", RateLimit(rpm=10_000_000)),
    ("provider:bench", RateLimit(max_parallel=1_000_000)),
    ("target:bench", RateLimit(tpm=10_000_000_000)),
]


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def busiest_minute(times: list[float]) -> int:
    """The most of `times` (seconds) within any 60 s: a sliding window over them sorted."""
    ordered, most, first = sorted(times), 0, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - 60:
            first += 1
        most = max(most, last - first + 1)
    return most


def held(levels: int, rpm: int, minutes: float, concurrency: int, timeout: int) -> None:
    """Levels every minute against one rate-limited provider, on three workers."""
    fake = FakeUpstream().start()
    host = provider_of(httpx.URL(fake.url))
    body = "".join(
        f'\n[levels.l{i}]\nschedule = "* * * * *"\nprompt = "Anything new?"\n'
        f'model = "fake-model"\ntimeout_seconds = {timeout}\n'
        for i in range(levels)
    )
    body += f'\n[rate_limits."{host}"]\nrpm = {rpm}\n'
    try:
        with database() as url, tempfile.TemporaryDirectory() as folder:
            config = configure(Path(folder), url, body, fake, runner=f"max_concurrent = {levels}")
            store = open_store(url)
            began = time.time()
            try:
                with processes(config, fake, WORKERS, concurrency) as (service, _):
                    assert service is not None
                    time.sleep(minutes * 60)  # the run's length is the figure's window
                    service.stop()
                    try:  # an overloaded machine may leave a job behind: figures without it
                        wait_until(
                            lambda: Ticks.read(store).ended(), "every tick ended", 4 * timeout
                        )
                    except AssertionError as exc:
                        print(f"  ({exc}: figures of what ended)")
            except subprocess.TimeoutExpired as exc:
                print(f"  ({exc}: killed)")
                for child in psutil.Process().children(recursive=True):
                    child.kill()
            took = time.time() - began
            ticks = Ticks.read(store)
            store.close()
    finally:
        ledger = fake.ledger
        fake.stop()
    sent = [entry.received_at for entry in ledger]
    refused = sum(
        1 for calls in ticks.of(ModelCalled.type).values() for c in calls if c.data["error"]
    )
    ended = Counter(kinds[0] for kinds in ticks.terminals().values() if kinds)
    stops = Counter(
        e.data.get("stop_reason") for ends in ticks.of(TickCompleted.type).values() for e in ends
    )
    waits = [
        e.data["waited_ms"] / 1000
        for limited in ticks.of(RateLimited.type).values()
        for e in limited
    ]
    # From a call's turn (its start is recorded right after it) to the upstream receiving it.
    arrived: dict[str, float] = {}
    for entry in ledger:
        arrived.setdefault(entry.key, entry.received_at)
    delays = [
        arrived[tick] - _epoch(starts[0].data["occurred_at"])
        for tick, starts in ticks.of(ModelCallStarted.type).items()
        if starts and tick in arrived
    ]
    lags = []
    for tick, started in ticks.of(TickStarted.type).items():
        scheduled = ticks.of(TickScheduled.type)[tick]
        if started and scheduled and scheduled[0].data.get("slot"):
            slot = scheduled[0].data["slot"]
            lags.append(started[0].recorded_at.timestamp() - _epoch(slot))
    print(
        f"held: {levels} levels on * * * * *, rpm {rpm} on {host}, {WORKERS} workers x "
        f"{concurrency}, {minutes:g} min of slots ({took:.0f} s with the drain)"
    )
    print(
        f"  upstream: {len(sent)} requests, busiest 60 s: {busiest_minute(sent)} "
        f"(limit {rpm}); 429s recorded: {refused}"
    )
    print(f"  ticks: {len(ticks.streams)}, ended {dict(ended)}, completed by {dict(stops)}")
    if lags:
        print(
            f"  queue wait slot -> TickStarted: median {statistics.median(lags):.1f} s, "
            f"p95 {percentile(lags, 0.95):.1f} s, max {max(lags):.1f} s"
        )
    if delays:
        print(
            f"  turn taken -> upstream received: median {statistics.median(delays):.2f} s, "
            f"p99 {percentile(delays, 0.99):.2f} s, max {max(delays):.2f} s "
            f"(spread {max(delays) - min(delays):.2f} s)"
        )
    if waits:
        print(
            f"  RateLimited waits: {len(waits)}, median {statistics.median(waits):.1f} s, "
            f"p95 {percentile(waits, 0.95):.1f} s, max {max(waits):.1f} s"
        )


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def cost(url: str, calls: int) -> None:
    """Latency of the check with three limits in scope, p50 and p99, wall and CPU."""
    store = open_store(url)
    for _ in range(50):  # connections, caches, the bucket rows
        call = Call(uuid.uuid4().hex, 500, 60.0)
        take(store, SCOPES, call)
        settle(store, call.call_id, 480)
    before, after = [], []
    cpu = time.process_time()
    for _ in range(calls):
        call = Call(uuid.uuid4().hex, 500, 60.0)
        began = time.perf_counter()
        turn = take(store, SCOPES, call)
        taken = time.perf_counter()
        settle(store, call.call_id, 480)
        before.append((taken - began) * 1000)
        after.append((time.perf_counter() - taken) * 1000)
        assert turn.wait == 0
    cpu_ms = (time.process_time() - cpu) * 1000 / calls
    # The floor under it on this machine now: one empty write transaction of one statement.
    empty = []
    for _ in range(calls):
        began = time.perf_counter()
        with store.write_transaction() as conn:
            conn.exec_driver_sql("SELECT 1")
        empty.append((time.perf_counter() - began) * 1000)
    store.close()
    kind = url.split(":")[0].split("+")[0]
    print(
        f"  {kind:>10}: check before the call p50 {statistics.median(before):.2f} ms, "
        f"p99 {percentile(before, 0.99):.2f} ms; settle after it p50 "
        f"{statistics.median(after):.2f} ms, p99 {percentile(after, 0.99):.2f} ms; "
        f"this process's CPU {cpu_ms:.2f} ms a call (both); an empty transaction of one "
        f"statement p50 {statistics.median(empty):.2f} ms, p99 {percentile(empty, 0.99):.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=1000)
    parser.add_argument("--rpm", type=int, default=600)
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--timeout", type=int, default=50)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--skip-held", action="store_true")
    arguments = parser.parse_args()
    print(describe())
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print(f"cost of the check, 3 limits in scope, {arguments.calls} calls:")
    with tempfile.TemporaryDirectory() as folder:
        sqlite = f"sqlite:///{folder}/events.db"
        migrate_store(sqlite)
        cost(sqlite, arguments.calls)
    with database() as url:
        migrate_store(url)
        cost(url, arguments.calls)
    if not arguments.skip_held:
        held(
            arguments.levels,
            arguments.rpm,
            arguments.minutes,
            arguments.concurrency,
            arguments.timeout,
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
