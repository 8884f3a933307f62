"""A backfill's forecast at scale: `tickwork backfill min --dry-run --json` over 10,000 slots.

Prepares a SQLite store holding `--days` of ticks for `--levels` levels on `* * * * *`
(`--per-day` ticks of each a day, at their slots, each with its spend, through the
store's own appends), the read models folded, and a configuration with a global and a
tag budget over them. Then runs the command once unmeasured (it folds the budgets read
model for the configured budgets and caches the bytecode, as an installed wheel's is:
`machine.cached_bytecode`), then `--runs` times in a process of its own each, and prints
each run's wall and CPU time and what it forecast, and the median CPU. The goal: under
a second. `--against` runs another build's `tickwork` (another virtualenv) on the same
store, its runs alternating with this build's so a change of load hits both alike.
`--instructions` counts each build's instructions in one more run (valgrind's callgrind):
on a shared machine the CPU time of a run moves by a third with the load, the count not.

    nice -n 5 .venv/bin/python ops/bench/backfill_forecast_bench.py [--levels 1000]
        [--days 7] [--per-day 24] [--slots 10000] [--runs 3] [--against OTHER_VENV]
        [--instructions]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from machine import cached_bytecode, describe, instructions
from service_config import write_config

from harness.contracts import BudgetSpent, NewEvent, TickCompleted, TickScheduled, TickStarted
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling import slot_tick_id
from harness.store import open_store

BATCH = 2000
"""Ticks created in one transaction."""


def level_names(count: int) -> list[str]:
    """`min` (the one backfilled) and the others."""
    return ["min", *(f"l{n:04d}" for n in range(1, count))]


def tables(levels: list[str], team_a_tokens: int) -> str:
    """The levels, all on `* * * * *`, half tagged `team-a`, and a global and a tag budget."""
    body = "".join(
        f'[levels.{name}]\nschedule = "* * * * *"\nprompt = "Hi."\nmodel = "gpt-4o-mini"\n'
        + ('tags = ["team-a"]\n' if n % 2 == 0 else "")
        for n, name in enumerate(levels)
    )
    return (
        body + '[[budgets]]\nname = "all-day"\nscope = "global"\nwindow = "day"\n'
        "tokens = 900000000\n"
        '[[budgets]]\nname = "team-a-24h"\nscope = "tag:team-a"\nwindow = "24h"\n'
        f"tokens = {team_a_tokens}\n"
    )


def tick(level: str, slot: datetime, tokens: int) -> list[NewEvent]:
    """A tick of `level` at `slot` that ran, spent `tokens` and completed."""
    tick_id = slot_tick_id(level, slot)
    at = slot + timedelta(seconds=5)
    events = [
        TickScheduled(tick_id=tick_id, level=level, slot=slot, occurred_at=slot),
        TickStarted(tick_id=tick_id, level=level, pid=1, host="bench", occurred_at=slot),
        BudgetSpent(
            tick_id=tick_id,
            level=level,
            model="gpt-4o-mini",
            prompt_tokens=tokens,
            completion_tokens=tokens // 4,
            occurred_at=at,
        ),
        TickCompleted(tick_id=tick_id, level=level, prompt_tokens=tokens, occurred_at=at),
    ]
    return [event.to_record() for event in events]


def prepare(url: str, levels: list[str], days: int, per_day: int, now: datetime) -> tuple[int, int]:
    """Append the history and fold the read models.

    Returns the ticks appended and the tokens the `team-a` levels spent in the last 24
    hours (the tag budget is set above them).
    """
    store = open_store(url)
    step = timedelta(days=1) / per_day
    first = (now - timedelta(days=days)).replace(second=0, microsecond=0)
    streams: dict[str, list[NewEvent]] = {}
    made = team_a = 0
    window_start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    """A rolling 24h budget's window: the 24 hours up to the end of the current UTC hour."""
    for k in range(days * per_day):
        slot = (first + k * step).replace(second=0, microsecond=0)
        for n, level in enumerate(levels):
            tokens = 1000 + 37 * n + k
            streams[f"tick-{slot_tick_id(level, slot)}"] = tick(level, slot, tokens)
            made += 1
            if n % 2 == 0 and slot + timedelta(seconds=5) >= window_start:
                team_a += tokens + tokens // 4
            if len(streams) >= BATCH:
                store.create_streams(streams)
                streams = {}
    if streams:
        store.create_streams(streams)
    projector_for(store, PriceBook({})).catch_up()
    store.close()
    return made, team_a


def timed(
    command: list[str], env: dict[str, str], folder: Path, run: int
) -> tuple[float, float, dict[str, Any]]:
    """Wall and CPU (user + system) seconds of one run of `command`, and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    done = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True)
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"run {run} exited {done.returncode}: {done.stderr}")
    return wall, used, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, default=1000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--per-day", type=int, default=24, help="ticks of each level a day")
    parser.add_argument("--slots", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--against", type=Path, help="Another build's virtualenv to time side by side."
    )
    parser.add_argument("--instructions", action="store_true", help="Count them too.")
    args = parser.parse_args()
    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        levels = level_names(args.levels)
        began, cpu = time.monotonic(), time.process_time()
        made, team_a = prepare(f"sqlite:///{root}/events.db", levels, args.days, args.per_day, now)
        # Room for about 4,000 of the backfill's ticks under the tag budget: it crosses.
        config = write_config(root, "", tables(levels, team_a + 5_000_000))
        print(
            f"store: {made:,} ticks ({args.levels} levels x {args.days} days x "
            f"{args.per_day} a day), {4 * made:,} events, prepared in "
            f"{time.monotonic() - began:.1f} s ({time.process_time() - cpu:.1f} s CPU), "
            f"{(root / 'events.db').stat().st_size / 2**20:.0f} MiB"
        )
        end = now.replace(second=0, microsecond=0) - timedelta(minutes=2)
        start = end - timedelta(minutes=args.slots)
        arguments = ["backfill", "min", "--from", start.isoformat(), "--to", end.isoformat()]
        arguments += ["--dry-run", "--json"]
        builds = {"this": Path(sys.executable).with_name("tickwork")}
        if args.against is not None:
            builds["other"] = args.against / "bin" / "tickwork"
        env = {
            k: v
            for k, v in cached_bytecode(root / "pycache").items()
            if not k.startswith("TICKWORK_")
        }
        env["TICKWORK_CONFIG"] = str(config)
        for tickwork in builds.values():
            timed([str(tickwork), *arguments], env, root, 0)
        cpus: dict[str, list[float]] = {name: [] for name in builds}
        for run in range(1, args.runs + 1):
            for name, tickwork in builds.items():
                wall, used, forecast = timed([str(tickwork), *arguments], env, root, run)
                cpus[name].append(used)
                print(
                    f"{name} run {run}: {wall:.2f} s wall, {used:.2f} s CPU: "
                    f"{len(forecast['slots']):,} slots to run, {forecast['left_alone']} left "
                    f"alone, tick {forecast['tick']['tokens']:,} tokens "
                    f"({forecast['tick']['source']}), {forecast['tokens']:,} tokens, crossings "
                    f"{[(c['budget'], c['fits']) for c in forecast['crossings']]}"
                )
        for name, used in cpus.items():
            print(f"{name}: CPU median {statistics.median(used):.2f} s ({args.runs} runs)")
        if args.instructions:
            for name, tickwork in builds.items():
                counted = instructions([str(tickwork), *arguments], root, env)
                print(f"{name}: {counted:,} instructions (callgrind)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
