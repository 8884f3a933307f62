"""Catch-ups under steady appends: threads folding the calibrations while samples arrive.

`--callers` threads call `current_calibrations` (a catch-up of the calibration read
model, then a read: what every tick's preparation does) for `--seconds`, while one
thread appends a `CalibrationSampled` every 40 ms, as a loaded service's ticks do.
Printed: calls a second, on a fresh store of each kind.

    .venv/bin/python ops/bench/catch_up_bench.py [--callers 16] [--seconds 15]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from machine import describe
from procrastinate_bench import database

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from harness.contracts.events import CalibrationSampled
from harness.projections import current_calibrations
from harness.store import migrate_store, open_store

SAMPLE_EVERY = 0.04


def calls_a_second(url: str, callers: int, seconds: float) -> float:
    """Calls of `current_calibrations` a second across `callers` threads."""
    migrate_store(url)
    store = open_store(url, connections=callers + 2)
    stop = threading.Event()
    calls = [0] * callers

    def sample() -> None:
        n = 0
        while not stop.wait(SAMPLE_EVERY):
            event = CalibrationSampled(
                tick_id=f"t{n}", source="worker", model="m", chars=4000, prompt_tokens=1000
            )
            store.append(event.stream_id, [event.to_record()])
            n += 1

    def call(i: int) -> None:
        while not stop.is_set():
            current_calibrations(store, ["m"])
            calls[i] += 1

    threads = [threading.Thread(target=sample)]
    threads += [threading.Thread(target=call, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    store.close()
    return sum(calls) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=15.0)
    arguments = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as folder:
        rate = calls_a_second(f"sqlite:///{folder}/events.db", arguments.callers, arguments.seconds)
    print(f"sqlite:     {rate:.1f} calls/s, {arguments.callers} callers")
    with database() as url:
        rate = calls_a_second(url, arguments.callers, arguments.seconds)
    print(f"postgresql: {rate:.1f} calls/s, {arguments.callers} callers")


if __name__ == "__main__":
    main()
