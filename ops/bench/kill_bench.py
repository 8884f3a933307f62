"""Kills at random moments: tick processes, then the service itself, and what they leave.

Starts `tickwork run` (a real process, SQLite store) with a few levels firing every two
seconds against the fake upstream, whose answers take a random 0.1 to 1.5 s and which counts
every call it answered. First it SIGKILLs the worker of a running tick at a random moment,
`--tick-kills` times; then it SIGKILLs the service itself at a random moment (every other
time once it has reconciled and runs waves) and starts it again at once, `--service-kills`
times: the workers it leaves run on, to be adopted or ended by the next one. A last
service reconciles and is stopped with SIGTERM. Then it checks, from the store, the
upstream's ledger and the process table:

- every tick stream ends in exactly one terminal event;
- every tick's recorded spend (estimated bookings included) covers the calls the upstream
  answered for it;
- no process of the run (service, fork server, worker) survives;
- no slot was claimed twice, and no attempt of a tick was started twice.

It prints the figures and exits 1 when a check fails.

    nice -n 5 .venv/bin/python ops/bench/kill_bench.py [--tick-kills 20] [--service-kills 20]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path

import psutil
from machine import describe
from service_config import write_config

from harness.contracts.events import TERMINAL_TYPES
from harness.devtools.fake_llm import LedgerEntry, Step, fake_upstream
from harness.store import EventStore, StoredEvent, open_store

LEVELS = 3
RUNNING = "tickwork running"
"""The service's line once it has reconciled and runs waves."""
MAX_DELAY = 1.5
"""The slowest answer: once every process is gone, the upstream has answered within this."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tick-kills", type=int, default=20)
    parser.add_argument("--service-kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    chance = random.Random(args.seed)
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as folder, fake_upstream() as fake:
        root = Path(folder)
        fake.script(
            "default",
            [Step(text="Checked.", delay=chance.uniform(0.1, MAX_DELAY)) for _ in range(5000)],
        )
        config = write_config(root, "shutdown_grace_seconds = 2\ngrace_seconds = 1", level_tables())
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
        env.update(TICKWORK_CONFIG=str(config), OPENAI_BASE_URL=fake.url)
        store = open_store(f"sqlite:///{root}/events.db")
        service, log = start(env, root, 0)
        tick_kills = kill_ticks(store, args.tick_kills, chance)
        running_when_killed = 0
        for n in range(1, args.service_kills + 1):
            if n % 2 == 0:  # every other one once it runs waves, the rest at any moment
                wait_for(runs(log), "a service to start")
            time.sleep(chance.uniform(0.5, 4.0))
            service.kill()
            service.wait()
            running_when_killed += RUNNING in log.read_text()
            service, log = start(env, root, n)
        wait_for(runs(log), "the last service to reconcile and run")
        time.sleep(3)  # a wave or two
        service.send_signal(signal.SIGTERM)
        service.wait(120)
        survivors = processes_of(config)
        time.sleep(MAX_DELAY + 0.5)  # calls in flight at the last kill are answered by now
        events = store.read_all(0, 10_000_000)
        store.close()
        failures = check(events, fake.ledger, survivors)
    print(f"tick workers SIGKILLed:   {tick_kills}")
    print(
        f"services SIGKILLed:       {args.service_kills} "
        f"({running_when_killed} after their start-up, the rest during it)"
    )
    print(f"wall time:                {time.monotonic() - began:.0f} s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for failure in failures:
        print(f"FAILED: {failure}")
    print("all checks hold" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


def level_tables() -> str:
    return "".join(
        f'[levels.l{i}]\nevery = "2s"\nprompt = "Check."\nmodel = "fake-model"\n'
        'overlap = "allow"\ntimeout_seconds = 20\n\n'
        for i in range(LEVELS)
    )


def start(env: dict[str, str], root: Path, n: int) -> tuple[subprocess.Popen[bytes], Path]:
    """The `n`th `tickwork run`, with its own log (unbuffered: a SIGKILL loses no line)."""
    tickwork = str(Path(sys.executable).with_name("tickwork"))
    path = root / f"service-{n}.log"
    with open(path, "ab") as log:
        service = subprocess.Popen(
            [tickwork, "run"],
            env={**env, "PYTHONUNBUFFERED": "1"},
            cwd=root,
            stdout=log,
            stderr=log,
        )
    return service, path


def runs(log: Path) -> Callable[[], bool]:
    """Whether the service logging to `log` has reconciled and runs waves."""
    return lambda: RUNNING in log.read_text()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.1)


def kill_ticks(store: EventStore, wanted: int, chance: random.Random) -> int:
    """SIGKILL the worker of a running tick at a random moment of its life, `wanted` times."""
    killed: set[int] = set()
    deadline = time.monotonic() + 120
    while len(killed) < wanted and time.monotonic() < deadline:
        running = running_workers(store.read_all(0, 10_000_000))
        candidates = [pid for pid in running if pid not in killed]
        if not candidates:
            time.sleep(0.1)
            continue
        pid = chance.choice(candidates)
        time.sleep(chance.uniform(0.0, 3.0))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue  # it ended first: not a kill
        killed.add(pid)
    return len(killed)


def running_workers(events: list[StoredEvent]) -> list[int]:
    """Pids of the workers of ticks started and not yet ended."""
    ended = {e.stream_id for e in events if e.type in TERMINAL_TYPES}
    return [
        int(e.data["pid"]) for e in events if e.type == "TickStarted" and e.stream_id not in ended
    ]


def processes_of(config: Path) -> list[str]:
    """Every process still running with this run's configuration in its environment."""
    found = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            if process.pid == os.getpid() or process.status() == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get("TICKWORK_CONFIG") == str(config):
                found.append(f"{process.pid} {' '.join(process.info['cmdline'] or [])}")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def check(events: list[StoredEvent], ledger: list[LedgerEntry], survivors: list[str]) -> list[str]:
    """The four promises, with their figures printed; returns what failed."""
    failures = []
    streams: dict[str, list[StoredEvent]] = defaultdict(list)
    for event in events:
        if event.stream_id.startswith("tick-"):
            streams[event.stream_id].append(event)
    terminals = Counter(
        sum(e.type in TERMINAL_TYPES for e in stream) for stream in streams.values()
    )
    ends = Counter(e.type for e in events if e.type in TERMINAL_TYPES)
    print(f"tick streams:             {len(streams)}")
    print(f"terminal events:          {dict(sorted(ends.items()))}")
    if set(terminals) != {1}:
        failures.append(f"streams by number of terminal events: {dict(terminals)}")
        for stream_id, stream in streams.items():
            if sum(e.type in TERMINAL_TYPES for e in stream) != 1:
                failures.append(f"{stream_id}: {[e.type for e in stream]}")
    answered = Counter(entry.key for entry in ledger)
    spent = [e for e in events if e.type == "BudgetSpent"]
    recorded = Counter(e.data["tick_id"] for e in spent)
    short = {tick: n for tick, n in answered.items() if recorded[tick] < n}
    billed = sum(entry.prompt_tokens + entry.completion_tokens for entry in ledger)
    booked = sum(e.data["prompt_tokens"] + e.data["completion_tokens"] for e in spent)
    estimated = [e for e in spent if e.data["estimated"]]
    print(f"calls answered upstream:  {sum(answered.values())}")
    print(
        f"spend recorded:           {len(spent)} calls ({len(estimated)} estimated, "
        f"{sum(e.data['source'] == 'runner' for e in estimated)} booked for a cut-off call)"
    )
    print(f"tokens billed / recorded: {billed} / {booked}")
    if short:
        failures.append(f"ticks whose answered calls lack recorded spend: {short}")
    print(f"processes left:           {len(survivors)}")
    if survivors:
        failures.append(f"processes survive: {survivors}")
    claims = Counter(
        (e.data["level"], e.data["slot"])
        for e in events
        if e.type == "TickScheduled" and e.data.get("slot")
    )
    twice = [slot for slot, n in claims.items() if n > 1]
    attempts = Counter(
        (e.stream_id, e.data.get("attempt", 1)) for e in events if e.type == "TickStarted"
    )
    rerun = [attempt for attempt, n in attempts.items() if n > 1]
    print(f"slots claimed:            {len(claims)} ({len(twice)} twice)")
    print(f"attempts started:         {len(attempts)} ({len(rerun)} twice)")
    if twice or rerun:
        failures.append(f"run twice: slots {twice}, attempts {rerun}")
    return failures


if __name__ == "__main__":
    sys.exit(main())
