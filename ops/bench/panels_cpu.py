"""CPU of one dashboard draw on a kept store, for an A/B of two checkouts on the same data.

`growth_bench.py --reuse` cannot reuse a store a `tickwork run` has ticked in (its layout
check wants the loader's ticks newest), so this draws `GET /dashboard/panels` in-process,
as `growth_bench` does, on the store a config names, as it is. Run it once per checkout
(`PYTHONPATH=<other checkout>` for the other) and compare; CPU is this process's.

    .venv/bin/python ops/bench/panels_cpu.py CONFIG [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from fastapi.testclient import TestClient
from machine import describe

from harness.api.app import create_app
from harness.config import load_settings
from harness.devtools.upstream import env_for_ticks
from harness.execution.manual import ManualTicks
from harness.store import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the kept store's tickwork.toml")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print(f"{describe()}; load average {os.getloadavg()[0]:.2f}")
    settings = load_settings(args.config)
    store = open_store(settings.store.url)
    manual = ManualTicks(settings, store, upstream=lambda: env_for_ticks(print), router=None)
    with TestClient(create_app(settings, store, manual)) as client:
        client.get("/dashboard/panels").raise_for_status()
        spent = []
        for _ in range(args.runs):
            began = time.process_time()
            client.get("/dashboard/panels").raise_for_status()
            spent.append(time.process_time() - began)
    store.close()
    print(
        f"GET /dashboard/panels CPU: p50 {statistics.median(spent) * 1000:.1f} ms, "
        f"least {min(spent) * 1000:.1f} ms ({args.runs} draws)"
    )


if __name__ == "__main__":
    main()
