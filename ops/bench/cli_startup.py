"""CLI start-up benchmark: `tickwork --help`, `status`, `ticks` and `show`, end to end.

An operator types these often, and a command that imports the web stack, the agent SDK
and every driver before it reads a single row feels broken. Each command runs as a fresh
process (what a shell does) in a temporary folder after `tickwork init`: `status` on the
empty store, then on one holding a day of ticks (after one unmeasured run has folded them,
so the runs measure start-up and reading, not catching up). Then `status`, `ticks` and
`show` once more while a `tickwork run` of the folder runs (its levels paused, so it fires
no tick): the service answers them on its local socket. Then the top imports of `tickwork
status` by cumulative time (`python -X importtime`), read alone and answered, to show where
time goes.

Every build runs with its bytecode cached, as an installed wheel's is: the commands get
a `PYTHONPYCACHEPREFIX` of their own, written by one unmeasured run of each build. Each
command's CPU median is printed beside its ratio to a bare `import typer, rich` measured
in the same runs (goals: `--help` <= 1.5x, `status`, `ticks`, `show` <= 2.5x), and the
modules it imports. Under
`PYTHONDONTWRITEBYTECODE` (set in some shells) a source tree whose `__pycache__` is stale
compiles every changed module on every run (a fresh worktree: 86 modules per `status`).

    .venv/bin/python ops/bench/cli_startup.py [--runs 15] [--ticks 300] [--top 25]
        [--against OTHER_VENV] [--instructions]

`--instructions` also counts the instructions each command runs, once per build, and
the bare import's (valgrind's callgrind, some 50 times slower), and prints their ratio:
on a shared machine CPU times move by 10 % from run to run with the load, which a count
of instructions does not see.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from machine import cached_bytecode, describe, instructions

from harness.cli.answered import question
from harness.config import service_socket
from harness.devtools.example_ticks import fill_example_store
from harness.local_socket import ask

QUESTION = question("status", {"as_json": False, "verbose": False}, Path("tickwork.toml"))
"""What `tickwork status` asks the service in the bench's folder (as the command asks it)."""

SERVICE_WAIT = 120.0
"""Seconds a started `tickwork run` may take to answer before the benchmark gives up."""

STATUS_IMPORTS = (
    "import sys; from harness.cli import main; sys.argv = ['tickwork', 'status']; main()"
)
BARE = [sys.executable, "-c", "import typer, rich"]
"""The floor every command stands on: Typer and Rich imported, nothing run."""


def tickwork_command(venv: Path | None = None) -> list[str]:
    """The installed `tickwork` script of `venv` (default: this interpreter's), as run."""
    if venv is not None:
        return [str(venv / "bin" / "tickwork")]
    script = Path(sys.executable).with_name("tickwork")
    return [str(script)] if script.exists() else [shutil.which("tickwork") or "tickwork"]


def run(command: list[str], folder: Path, environment: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run; a failing command stops the benchmark.

    CPU time is the figure to compare across runs on a shared machine: other processes
    stretch the wall time of a run far more than its CPU time.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=folder, env=environment, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def stderr_of(command: list[str], folder: Path, environment: dict[str, str]) -> str:
    """What a successful run of `command` wrote to stderr (a tool's report on it)."""
    return subprocess.run(
        command,
        cwd=folder,
        env=environment,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ).stderr


def unmeasured_status(
    builds: dict[str, list[str]], folder: Path, environment: dict[str, str]
) -> None:
    """`status` once per build: the read models fold what is new, the bytecode is cached."""
    for tickwork in builds.values():
        run([*tickwork, "status"], folder, environment)


def percentile_90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]


def figures(
    label: str,
    builds: dict[str, list[str]],
    arguments: list[str],
    folder: Path,
    environment: dict[str, str],
    runs: int,
    bare_instructions: int | None = None,
) -> None:
    """One line per build and its ratio to the bare import, timed in the same rounds.

    The builds' runs and the bare import's alternate, so a change of load hits them alike.
    With `bare_instructions` (the bare import's count), one more line per build: the
    command's instructions and their ratio to it.
    """
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in [*builds, "bare"]}
    for _ in range(runs):
        for name, tickwork in builds.items():
            timings[name].append(run([*tickwork, *arguments], folder, environment))
        timings["bare"].append(run(BARE, folder, environment))
    bare = statistics.median(cpu for _, cpu in timings.pop("bare"))
    modules = imported_modules(folder, environment, arguments)
    for name, done in timings.items():
        walls, cpus = zip(*done, strict=True)
        print(
            f"{name + ' ' + label:<34} wall median {statistics.median(walls):6.3f} s  p90 "
            f"{percentile_90(list(walls)):6.3f} s   CPU median {statistics.median(cpus):6.3f} s"
            f"  p90 {percentile_90(list(cpus)):6.3f} s   {statistics.median(cpus) / bare:4.2f}x "
            f"the bare import's {bare:.3f} s  ({runs} runs, {modules} modules)"
        )
    if bare_instructions is not None:
        for name, tickwork in builds.items():
            count = instructions([*tickwork, *arguments], folder, environment)
            print(
                f"{name + ' ' + label:<34} {count:,} instructions, "
                f"{count / bare_instructions:4.2f}x the bare import's {bare_instructions:,}"
            )


def imported_modules(folder: Path, environment: dict[str, str], arguments: list[str]) -> int:
    """How many modules `tickwork ARGUMENTS` imports (this build's, `-X importtime`)."""
    code = f"import sys; from harness.cli import main; sys.argv = ['tickwork', *{arguments!r}]"
    report = stderr_of(
        [sys.executable, "-X", "importtime", "-c", code + "; main()"], folder, environment
    )
    return sum(line.startswith("import time:") for line in report.splitlines()) - 1


@contextlib.contextmanager
def service(
    tickwork: list[str], folder: Path, environment: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """`tickwork run` in `folder`, its levels paused, until it answers `status`; then stopped."""
    for level in ("min", "hour"):
        run([*tickwork, "pause", level], folder, environment)
    with (folder / "service.log").open("w") as log:
        process = subprocess.Popen(
            [*tickwork, "run"], cwd=folder, env=environment, stdout=log, stderr=log
        )
        try:
            with contextlib.chdir(folder):
                socket = service_socket(folder / "tickwork.toml")
            given_up = time.monotonic() + SERVICE_WAIT
            while ask(socket, QUESTION) is None:
                if process.poll() is not None or time.monotonic() > given_up:
                    said = (folder / "service.log").read_text()
                    raise SystemExit(f"tickwork run ended or never answered `status`: {said}")
                time.sleep(0.2)
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=120)


def answers(pid: int, folder: Path, runs: int) -> None:
    """The service's side: wall time of one answer as asked here, and the CPU it spends.

    The CPU is the service process's over all the questions, divided by their number:
    its heartbeats and paused slots in that time are counted too.
    """
    with contextlib.chdir(folder):
        socket = service_socket(folder / "tickwork.toml")
    walls = []
    before = process_cpu(pid)
    for _ in range(runs):
        started = time.perf_counter()
        if ask(socket, QUESTION) is None:
            raise SystemExit("the service gave no answer")
        walls.append(time.perf_counter() - started)
    spent = (process_cpu(pid) - before) / runs
    print(
        f"{'the service answering':<34} wall median {statistics.median(walls):6.3f} s  p90 "
        f"{percentile_90(walls):6.3f} s   CPU {spent:6.3f} s an answer  ({runs} questions)"
    )


def process_cpu(pid: int) -> float:
    """User + system seconds a running process has spent so far (Linux `/proc`)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def top_imports(folder: Path, environment: dict[str, str], top: int, label: str) -> None:
    """The imports of `tickwork status` with the largest cumulative time, in microseconds."""
    report = stderr_of(
        [sys.executable, "-X", "importtime", "-c", STATUS_IMPORTS], folder, environment
    )
    rows = []
    for line in report.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((int(cumulative), int(own), name[1:].rstrip()))
    total = sum(cumulative for cumulative, _, name in rows if not name.startswith(" "))
    print(
        f"\n`tickwork status` {label} imports: {len(rows)} modules, "
        f"{total / 1e6:.3f} s at top level"
    )
    print(f"{'cumulative µs':>14} {'self µs':>9}  module (indent = imported by the line above)")
    for cumulative, own, name in sorted(rows, reverse=True)[:top]:
        print(f"{cumulative:>14,} {own:>9,}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--ticks", type=int, default=300, help="Ticks in the filled store.")
    parser.add_argument("--top", type=int, default=25, help="Imports to list.")
    parser.add_argument(
        "--against", type=Path, help="Another build's virtualenv to time side by side."
    )
    parser.add_argument(
        "--instructions", action="store_true", help="Count each command's instructions too."
    )
    args = parser.parse_args()
    print(describe())
    print(f"load average: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    tickwork = tickwork_command()
    builds = {"this": tickwork}
    if args.against is not None:
        builds["other"] = tickwork_command(args.against)
        print(f"other: {args.against}")
    with tempfile.TemporaryDirectory(prefix="tickwork-cli-bench-") as name:
        folder = Path(name) / "run"
        folder.mkdir()
        environment = cached_bytecode(Path(name) / "pycache")
        subprocess.run(
            [*tickwork, "init"], cwd=folder, env=environment, check=True, stdout=subprocess.DEVNULL
        )
        unmeasured_status(builds, folder, environment)
        run(BARE, folder, environment)  # its bytecode cached too
        bare = instructions(BARE, folder, environment) if args.instructions else None
        for label, arguments in (("--help", ["--help"]), ("status (empty)", ["status"])):
            figures(f"tickwork {label}", builds, arguments, folder, environment, args.runs, bare)
        shown = fill_example_store(folder, args.ticks, calls=2)
        unmeasured_status(builds, folder, environment)
        for arguments in (["status"], ["ticks"], ["show", shown]):
            label = f"tickwork {arguments[0]} ({args.ticks} ticks)"
            figures(label, builds, arguments, folder, environment, args.runs, bare)
        top_imports(folder, environment, args.top, "(read alone)")
        with service(tickwork, folder, environment) as running:
            for arguments in (["status"], ["ticks"], ["show", shown]):
                label = f"tickwork {arguments[0]} ({args.ticks} ticks, answered)"
                figures(label, builds, arguments, folder, environment, args.runs, bare)
            answers(running.pid, folder, args.runs)
            top_imports(folder, environment, args.top, "(answered by `tickwork run`)")
    print(f"load average after: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")


if __name__ == "__main__":
    main()
