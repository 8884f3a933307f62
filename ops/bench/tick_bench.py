"""Tick start latency and CPU per tick, over the cold-spawn launcher.

Start latency: from the runner spawning the worker to the worker's first request at the
(fake, instant) upstream. CPU per tick: user + system time of the worker process, which is
all work outside the model since the fake answers at once. Medians of N ticks (default 20),
each a one-call tick with no tools. This is the baseline for the warm-start launcher.

    .venv/bin/python ops/bench/tick_bench.py [--ticks 20]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path

from machine import describe

from harness.config import LevelConfig, PathsConfig, Settings, StoreConfig
from harness.devtools.fake_llm import fake_upstream
from harness.execution.launchers import ColdLauncher, TickProcess
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.store import open_store


class TimedLauncher(ColdLauncher):
    """The cold launcher, noting when each spawn began."""

    def __init__(self) -> None:
        self.spawned_at: dict[str, float] = {}
        self.current = ""

    def _start(self, payload_json: bytes, log_path: Path, env: dict[str, str]) -> TickProcess:
        self.spawned_at[self.current] = time.time()
        return super()._start(payload_json, log_path, env)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=20)
    args = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as folder, fake_upstream() as fake:
        root = Path(folder)
        settings = Settings(
            store=StoreConfig(url=f"sqlite:///{root}/events.db"),
            paths=PathsConfig(results=root / "results", spool=root / "spool"),
            levels={"min": LevelConfig(every="1m", prompt="Say hi.", model="fake-model")},
        )
        store = open_store(settings.store.url)
        launcher = TimedLauncher()
        env = {**os.environ, "OPENAI_BASE_URL": fake.url}
        preparer = Preparer(settings, store, env=env)
        runner = Runner(settings, store, launcher, env=env)
        latencies, cpu, wall = [], [], []
        for _ in range(args.ticks):
            prepared = preparer.prepare("min")
            launcher.current = prepared.payload.tick_id
            before_cpu, began = children_cpu(), time.perf_counter()
            outcome = runner.run(prepared)
            wall.append(time.perf_counter() - began)
            cpu.append(children_cpu() - before_cpu)
            assert outcome.status == "completed", outcome.reason
            tick = prepared.payload.tick_id
            latencies.append(fake.state.first_request[tick] - launcher.spawned_at[tick])
        store.close()
    ms = 1000 * statistics.median(latencies)
    print(f"ticks: {args.ticks} (cold spawn of `python -m workers.llm_worker`)")
    print(f"  start latency, spawn -> first upstream request: median {ms:7.0f} ms")
    print(f"    (min {min(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms)")
    print(f"  CPU per tick, worker user+sys: median {1000 * statistics.median(cpu):7.0f} ms")
    print(
        f"  wall per tick, start to terminal event: median {1000 * statistics.median(wall):5.0f} ms"
    )


if __name__ == "__main__":
    main()
