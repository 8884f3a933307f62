"""A live edit at scale: what a reload of N levels costs, and how long it holds the timetable.

Its second half runs on the timetable loop's own thread (between two looks, never during
a wave), so its time is how late the next slot can fire. Writes a tickwork.toml with N
levels on `* * * * *`, wires a service on a SQLite store as `tickwork run` does (no
slot fires), then edits the file R times, each changing 10 % of the levels' prompts,
adding 1 % and removing 1 %, and times both halves of each reload: reading and validating
the file (`LevelsReload.look`, on the watcher thread in `tickwork run`) and putting it in
force (`poll`: revision, swap, retime, `ConfigReloaded`, `LevelsRecorded`, the capacity
check), which holds the timetable; and the capacity check alone (the levels' demand from
their schedules, their pauses and recent run times: `harness.scheduling.capacity`).
Prints wall and CPU time of each: the machine is shared.

    .venv/bin/python ops/bench/reload_bench.py [--levels 1000] [--reloads 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from machine import describe

from harness.config import load_settings
from harness.contracts.events import utcnow
from harness.execution.executors import LocalExecutor
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.scheduling.capacity import read_capacity
from harness.scheduling.reload import LevelsReload
from harness.scheduling.service import Service
from harness.scheduling.timetable import Timetable
from harness.store import open_store


def config_text(folder: Path, names: list[str], generation: int) -> str:
    """The file with `names`, every tenth level's prompt naming the generation."""
    head = f"""
[store]
url = "sqlite:///{folder}/events.db"
[paths]
results = "{folder}/results"
spool = "{folder}/spool"
"""
    levels = "".join(
        f'\n[levels.{name}]\nschedule = "* * * * *"\nmodel = "fake-model"\n'
        f'prompt = "Anything new? ({generation if i % 10 == 0 else 0})"\n'
        for i, name in enumerate(names)
    )
    return head + levels


def timed(step: Callable[[], object]) -> tuple[float, float]:
    """Wall and CPU seconds of calling `step`."""
    wall, cpu = time.perf_counter(), time.process_time()
    step()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, default=1000)
    parser.add_argument("--reloads", type=int, default=5)
    args = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "tickwork.toml"
        names = [f"l{i:05d}" for i in range(args.levels)]
        path.write_text(config_text(folder, names, 0))
        settings = load_settings(path)
        store = open_store(settings.store.url)
        executor = LocalExecutor(
            settings, Preparer(settings, store), Runner(settings, store), lambda line: None
        )
        service = Service(settings, store, executor, lambda line: None)
        service.timetable = Timetable(service.triggers, utcnow())
        reload = service.reload = LevelsReload(service, path, lambda line: None)
        wall, cpu = timed(reload.poll)
        print(
            f"{args.levels} levels: first store of the revision {wall * 1000:.0f} ms "
            f"wall, {cpu * 1000:.0f} ms CPU"
        )
        looks: list[tuple[float, float]] = []
        holds: list[tuple[float, float]] = []
        step = max(1, args.levels // 100)
        for generation in range(1, args.reloads + 1):
            names = names[step:] + [f"n{generation:03d}{i:04d}" for i in range(step)]
            path.write_text(config_text(folder, names, generation))
            looks.append(timed(lambda: reload.look(forced=True)))
            holds.append(timed(reload.poll))
            assert set(service.settings.levels) == set(names), "a reload was refused"
        capacity = [
            timed(lambda: read_capacity(service.settings, store)) for _ in range(args.reloads)
        ]
        for what, times in (
            ("read and validate, on the watcher thread", looks),
            ("put in force, holding the timetable", holds),
            ("of which the capacity check (demand, pauses, run times)", capacity),
        ):
            wall = statistics.median(t[0] for t in times) * 1000
            cpu = statistics.median(t[1] for t in times) * 1000
            print(
                f"{what}: median {wall:.0f} ms wall, {cpu:.0f} ms CPU "
                f"(max {max(t[0] for t in times) * 1000:.0f} ms wall)"
            )
        store.close()


if __name__ == "__main__":
    main()
