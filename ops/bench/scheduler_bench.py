"""The scheduler under load: many levels on one schedule, real ticks, the default cap.

Starts `tickwork run` (a real process) with N levels firing every minute against the fake
upstream (instant answers), lets it run for D seconds, stops it with SIGTERM, then reads
the store: fire lag (slot -> TickScheduled recorded), queue wait (TickScheduled ->
TickStarted), ticks completed per minute, and the peak RSS of the service process
(sampled every 0.5 s, workers not included). With several launchers (`--launchers
cold,warm`) the same run is made with each in turn, in the same conditions, and the
ratio of ticks completed per minute is printed.

With `--jitter 60s` every level gets that jitter: the claims (fires) per second are
printed as a histogram over the second of the minute, with the busiest second against
the mean (the goal: at most 3x), and the fire lag is measured from each slot's jittered
time (`TickScheduled.fire_at`), as `/metrics` measures it.

`--claims-only` runs the scheduler (`Service`) in this process with an executor that
ends each tick completed at once, no worker process: the figures of the firing alone,
without the ticks competing for the cores.

    .venv/bin/python ops/bench/scheduler_bench.py [--levels 1000] [--seconds 300]
        [--launchers warm] [--jitter 60s] [--claims-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

from machine import describe, peak_rss
from service_config import start_service, write_config

from harness.config import LevelConfig, PathsConfig, Settings, StoreConfig
from harness.contracts.events import TickCompleted
from harness.devtools.fake_llm import fake_upstream
from harness.scheduling import RunningTick, ScopeMatch, Service, SlotClaim
from harness.store import EventStore, StoredEvent, open_store


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--launchers", default="warm", help="comma-separated: cold, warm")
    parser.add_argument(
        "--runner",
        default="",
        help="extra [runner] lines for both launchers, e.g. 'max_concurrent = 16' "
        "(the default cap of 4 with 0.25 s spacing holds warm ticks to 240 a minute)",
    )
    parser.add_argument("--jitter", default="", help="every level's jitter, e.g. 60s")
    parser.add_argument("--claims-only", action="store_true", help="no ticks: firing alone")
    args = parser.parse_args()
    print(describe())
    if args.claims_only:
        claims_only(args.levels, args.seconds, args.jitter)
        return
    rates = {}
    for launcher in args.launchers.split(","):
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        runner = args.runner.replace(";", "\n")
        rates[launcher] = run(args.levels, args.seconds, launcher, runner, args.jitter)
    if "cold" in rates and "warm" in rates and rates["cold"]:
        print(f"ticks completed per minute, warm/cold: {rates['warm'] / rates['cold']:.1f}x")


def run(levels: int, seconds: int, launcher: str, runner: str = "", jitter: str = "") -> float:
    """One service run with `launcher`; prints its figures, returns ticks completed a minute."""
    jittered = f'jitter = "{jitter}"\n' if jitter else ""
    with tempfile.TemporaryDirectory() as folder, fake_upstream() as fake:
        root = Path(folder)
        tables = "".join(
            f'[levels.l{i:04d}]\nschedule = "* * * * *"\nprompt = "Hi."\nmodel = "fake-model"\n'
            f"timeout_seconds = 60\n{jittered}\n"
            for i in range(levels)
        )
        config = write_config(
            root, f'shutdown_grace_seconds = 5\nlauncher = "{launcher}"\n{runner}', tables
        )
        up = datetime.now(UTC) + STARTING
        service = start_service(
            root, config, fake.url, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        peak = peak_rss(service, seconds)
        service.send_signal(signal.SIGTERM)
        service.wait(120)
        cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(f"  CPU of the service and its ticks: {cpu.ru_utime + cpu.ru_stime:.1f} s")
        store = open_store(f"sqlite:///{root}/events.db")
        events = store.read_all(0, 10_000_000)
        store.close()
    scheduled = {e.stream_id: e for e in events if e.type == "TickScheduled"}
    started = {e.stream_id: e for e in events if e.type == "TickStarted"}
    lags = [fire_lag(e.recorded_at, e.data) for e in scheduled.values() if e.data.get("slot")]
    steady = [fire_lag(e.recorded_at, e.data) for e in scheduled.values() if fired(e.data, up)]
    waits = [
        (started[s].recorded_at - e.recorded_at).total_seconds()
        for s, e in scheduled.items()
        if s in started
    ]
    completed = sum(e.type == "TickCompleted" for e in events)
    cap = runner.replace("\n", ", ") or "default cap"
    print(f"launcher {launcher}: levels {levels}, one slot a minute each, {seconds} s, {cap}")
    print_lags(len(scheduled), lags, steady)
    print(
        f"  queue wait p50 / p99:        {percentile(waits, 0.5):.1f} / "
        f"{percentile(waits, 0.99):.1f} s ({len(waits)} started)"
    )
    waves: dict[str, float] = {}
    for e in scheduled.values():
        if e.data.get("slot"):
            lag = fire_lag(e.recorded_at, e.data)
            waves[e.data["slot"]] = max(waves.get(e.data["slot"], 0.0), lag)
    print(
        "  fire lag, worst of each wave: " + ", ".join(f"{w:.2f}" for _, w in sorted(waves.items()))
    )
    if jitter:
        spread([e.recorded_at for e in scheduled.values() if e.data.get("slot")])
    rate = completed / (seconds / 60)
    print(f"  ticks completed per minute:  {rate:.1f}")
    print(f"  peak RSS of the service:     {peak / 2**20:.0f} MiB")
    print(f"  skipped (overlap etc.):      {sum(e.type == 'TickSkipped' for e in events)}")
    return rate


class InstantTicks:
    """An executor whose ticks complete the moment they are handed on (no process)."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def submit(self, claim: SlotClaim) -> None:
        done = TickCompleted(tick_id=claim.tick_id, level=claim.level)
        self.store.append(done.stream_id, [done.to_record()])

    def never_started(self, claim: SlotClaim, reason: str | None) -> None:
        self.submit(claim)

    def cancel(self, matches: ScopeMatch, reason: str, running: bool = True) -> None:
        pass

    def running(self) -> list[RunningTick]:
        return []

    def adopt(self, started: StoredEvent, now: datetime) -> None:
        pass

    def record_lost(self, tick_id: str, level: str, reason: str) -> None:
        pass

    def claimer_gone(self, host: str, pid: int) -> bool:
        return False

    def abandoned(self, tick_id: str, level: str) -> str | None:
        return None

    def wait_idle(self, timeout: float) -> None:
        pass

    def shutdown(self, grace: float) -> None:
        pass


def claims_only(levels: int, seconds: int, jitter: str) -> None:
    """The scheduler in this process, ticks completed at once: the firing's own figures."""
    jittered = {"jitter": jitter} if jitter else {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        settings = Settings(
            store=StoreConfig(url=f"sqlite:///{root}/events.db"),
            paths=PathsConfig(results=root / "results", spool=root / "spool"),
            levels={
                f"l{i:04d}": LevelConfig(schedule="* * * * *", model="fake-model", **jittered)
                for i in range(levels)
            },
        )
        store = open_store(settings.store.url)
        service = Service(settings, store, InstantTicks(store), lambda line: None)
        up = datetime.now(UTC) + STARTING
        started = time.process_time()
        timer = threading.Timer(seconds, service.stopping.set)
        timer.start()
        service.serve()
        cpu = time.process_time() - started
        events = store.read_all(0, 10_000_000)
        store.close()
    scheduled = [e for e in events if e.type == "TickScheduled" and e.data.get("slot")]
    lags = [fire_lag(e.recorded_at, e.data) for e in scheduled]
    steady = [fire_lag(e.recorded_at, e.data) for e in scheduled if fired(e.data, up)]
    print(
        f"claims only: levels {levels}, one slot a minute each, jitter {jitter or 'none'}, "
        f"{seconds} s, CPU of the scheduler {cpu:.1f} s ({100 * cpu / seconds:.0f}% of a core)"
    )
    print_lags(len(scheduled), lags, steady)
    print(f"  load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if jitter:
        spread([e.recorded_at for e in scheduled])


def print_lags(claimed: int, lags: list[float], steady: list[float]) -> None:
    """Slots claimed, and the fire lag of all of them and of those fired after start-up."""
    print(f"  slots claimed:               {claimed}")
    for label, values in (
        ("fire lag p50 / p99 / max:   ", lags),
        ("the same, after start-up:", steady),
    ):
        print(
            f"  {label} {percentile(values, 0.5):.3f} / {percentile(values, 0.99):.3f} / "
            f"{max(values, default=float('nan')):.3f} s"
        )


STARTING = timedelta(seconds=10)
"""Fire times this soon after the start are left out of the steady-state lag: at start the
service claims at once the slots that fell due in the last 5 s (`JUST_DUE`), up to 5 s
late by design, about 8% of a minute's slots when 1,000 levels are jittered over it."""


def fired(data: dict[str, object], after: datetime) -> bool:
    """Whether the slot's fire time lies after `after`."""
    at = data.get("fire_at") or data.get("slot")
    return at is not None and datetime.fromisoformat(str(at)) >= after


def fire_lag(recorded_at: datetime, data: dict[str, object]) -> float:
    """Seconds from the slot's fire time (jittered, if it was) to its claim."""
    fired = data.get("fire_at") or data["slot"]
    return (recorded_at - datetime.fromisoformat(str(fired))).total_seconds()


def spread(claims: list[datetime]) -> None:
    """Claims per second: over whole minutes of the run, and summed by second of minute."""
    per_second = Counter(int(at.timestamp()) for at in claims)
    first, last = min(per_second), max(per_second)
    minutes = range(first - first % 60 + 60, last - last % 60, 60)  # whole minutes only
    inside = [per_second.get(second, 0) for m in minutes for second in range(m, m + 60)]
    if not inside:
        print("  no whole minute of claims: run longer")
        return
    mean = sum(inside) / len(inside)
    print(
        f"  claims per second over {len(minutes)} whole minute(s): mean {mean:.1f}, "
        f"max {max(inside)} ({max(inside) / mean:.2f}x the mean), min {min(inside)}"
    )
    by_second = Counter(at.second for at in claims)
    top = max(by_second.values())
    print("  claims by second of the minute (all minutes):")
    for second in range(60):
        count = by_second.get(second, 0)
        print(f"    :{second:02d} {count:5d} {'#' * round(40 * count / top)}")


if __name__ == "__main__":
    main()
