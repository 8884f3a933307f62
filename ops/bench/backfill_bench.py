"""A backfill of many slots: how long a running service takes to run them, real ticks.

Starts `tickwork run` (a real process) with one level on `* * * * *` against the fake
upstream (instant answers), records a backfill of the last N minutes' slots (`--max`
ticks in flight at once, overlap `allow`), and waits for `BackfillFinished`. Prints the
time from request to finish, ticks completed per minute, the claim pace, and the CPU
time the service and its tick processes used (the machine is shared: CPU next to wall).

    .venv/bin/python ops/bench/backfill_bench.py [--slots 1000] [--max 16]
        [--runner 'max_concurrent = 16;start_spacing_seconds = 0']
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

from machine import describe
from service_config import start_service, write_config

from harness.config import load_settings
from harness.contracts import BACKFILL_STREAM, BackfillFinished, TickCompleted, TickScheduled
from harness.devtools.fake_llm import fake_upstream
from harness.scheduling.backfill import request_backfill
from harness.store import open_store


def drain(service: subprocess.Popen[str], running: threading.Event) -> None:
    """Read the service's log as it comes (a full pipe would stop it); note when it runs."""
    assert service.stdout is not None
    for line in service.stdout:
        if "tickwork running" in line:
            running.set()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--max", type=int, default=16, help="backfill ticks in flight at once")
    parser.add_argument(
        "--runner",
        default="max_concurrent = 16;start_spacing_seconds = 0",
        help="[runner] lines, `;`-separated (the default cap of 4 would hold --max to 4)",
    )
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as folder, fake_upstream() as fake:
        root = Path(folder)
        level = (
            '[levels.bf]\nschedule = "* * * * *"\nprompt = "Hi."\nmodel = "fake-model"\n'
            "timeout_seconds = 60\n"
        )
        config = write_config(
            root, "shutdown_grace_seconds = 5\n" + args.runner.replace(";", "\n"), level
        )
        service = start_service(
            root,
            config,
            fake.url,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        running = threading.Event()
        threading.Thread(target=drain, args=(service, running), daemon=True).start()
        running.wait(300)
        store = open_store(f"sqlite:///{root}/events.db")
        end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=2)
        start = end - timedelta(minutes=args.slots)
        settings = load_settings(config)
        began = time.monotonic()
        request = request_backfill(
            settings, store, "bf", start, end, overlap="allow", max_at_once=args.max, by="bench"
        )
        finished = None
        while time.monotonic() - began < args.timeout:
            ends = store.read_streams([BACKFILL_STREAM], types=[BackfillFinished.type])
            if ends[BACKFILL_STREAM]:
                finished = time.monotonic() - began
                break
            time.sleep(1)
        service.send_signal(signal.SIGTERM)
        service.wait(300)
        events = store.read_all(0, 10_000_000)
        store.close()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    scheduled = [e for e in events if e.type == TickScheduled.type and e.data.get("backfill")]
    completed = sum(e.type == TickCompleted.type for e in events)
    claims = sorted(e.recorded_at for e in scheduled)
    span = (claims[-1] - claims[0]).total_seconds() if len(claims) > 1 else float("nan")
    print(
        f"backfill of {request.slots} slots, --max {args.max}, runner "
        f"{args.runner.replace(';', ', ')}"
    )
    if finished is None:
        print(f"  NOT finished within {args.timeout:.0f} s")
        finished = args.timeout
    print(f"  time to finish:              {finished:.1f} s wall")
    distinct = len({e.stream_id for e in scheduled})
    print(f"  slots claimed by it:         {len(scheduled)} ({distinct} distinct)")
    print(f"  ticks completed:             {completed}")
    print(f"  ticks completed per minute:  {completed / (finished / 60):.1f}")
    print(f"  first to last claim:         {span:.1f} s")
    print(
        f"  CPU of service + ticks:      {usage.ru_utime + usage.ru_stime:.1f} s "
        f"(user {usage.ru_utime:.1f}, sys {usage.ru_stime:.1f})"
    )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
