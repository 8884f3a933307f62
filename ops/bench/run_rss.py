"""Peak RSS of `tickwork run` on a kept store, as `growth_bench` measures it, for an A/B.

`growth_bench.py` measures the service once per load; this runs it on a store a config
names, as it is (a kept growth store, its earlier runs' real ticks in it), so two
checkouts can be compared on the same data (`PYTHONPATH=<other checkout>` for the other).

    .venv/bin/python ops/bench/run_rss.py CONFIG [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from growth_bench import run_rss_mib
from machine import describe


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the kept store's tickwork.toml")
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()
    print(f"{describe()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    peak = run_rss_mib(args.config, args.seconds)
    print(f"tickwork run peak RSS ({args.seconds} s): {peak:,.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
