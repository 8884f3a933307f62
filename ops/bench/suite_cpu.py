"""Test-suite CPU benchmark: the CPU seconds each test file costs, children included.

The suite's budget is five minutes on two shared cores, so what counts is CPU, not wall
time (wall time on a loaded machine says how busy the machine was). Each file runs in a
pytest process of its own with a small plugin that charges every test the CPU of the
test process plus the children it waited for (`tickwork` subprocesses, forked children,
workers): `RUSAGE_SELF + RUSAGE_CHILDREN` before and after, and the processes below it
still running, with what they reaped (the shared fork server lives as long as the test
process and is never waited for: its warm-ups and every tick it forked counted nowhere
before). Files run one after another,
so a before/after pair of the same file meets the same load when listed next to each
other (e.g. a copy of the file from `main` as `tests/before_x.py`, then `tests/test_x.py`).
With `--workers N` the files run as `make test` runs them, in one pytest over N xdist
workers: the suite's CPU (pytest and every process it waited for) and the costliest tests
and files across the workers. With `--processes` as well, the CPU by kind of process
instead (xdist workers, fork servers, ticks, agent CLIs...): every process below pytest
is looked at every quarter of a second, so one that lives less long may go uncounted;
with `--top N`, the N costliest pairs of a kind and the test that started its processes
(the test its xdist worker was running when a process was first seen: fork servers and
what they forked included, whose environment names no test). With `--timeline` as well,
where the wall goes: when the first test starts (the workers' collections before it), how
many workers are busy in each ten seconds, when each worker ends, and the tests still
running once the first worker has nothing left (a long test at the back of a share ends
the run alone: the `long` mark in tests/conftest.py).

    .venv/bin/python ops/bench/suite_cpu.py tests/test_archive.py tests/test_cli.py [--top 5]
    CI=true .venv/bin/python ops/bench/suite_cpu.py tests --workers 4 --top 40
    CI=true .venv/bin/python ops/bench/suite_cpu.py tests --workers 4 --processes [--top 40]
    CI=true .venv/bin/python ops/bench/suite_cpu.py tests --workers 4 --timeline
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psutil
from machine import describe

PLUGIN = """
import json, os, resource, time
import psutil
import pytest

_rows = []


def _alive_below():
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def _cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + waited.ru_utime + waited.ru_stime + _alive_below()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    before, started, at = _cpu(), time.monotonic(), time.time()
    yield
    _rows.append((item.nodeid, _cpu() - before, time.monotonic() - started, at))


def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.environ["SUITE_CPU_OUT"] + "." + worker, "w") as out:
        json.dump(_rows, out)
"""

CURRENT_PLUGIN = """
import os


def pytest_runtest_logstart(nodeid, location):
    named = os.path.join(os.environ["SUITE_CPU_CURRENT"], str(os.getpid()))
    with open(named + ".new", "w") as out:
        out.write(nodeid)
    os.replace(named + ".new", named)  # the poller never reads a file half written
"""
"""Each worker's current test, in a file named by its pid, for `--processes` to name tests by."""


Row = tuple[str, float, float]
Span = tuple[str, float, float, str]
"""A test's worker, start and end (seconds after pytest started) and name."""


def measure(
    paths: list[str], folder: Path, workers: int
) -> tuple[float, float, list[Row], int, list[Span]]:
    """One pytest run: its wall seconds, CPU seconds, per-test (CPU, wall), exit code, spans.

    The tests that failed are printed as pytest names them.

    The CPU is pytest's and every process it waited for, its xdist workers and what they
    waited for included, as `time make test` counts it.
    """
    out = folder / "rows.json"
    env = {**os.environ, "PYTHONPATH": str(folder), "SUITE_CPU_OUT": str(out)}
    spread = ["-n", str(workers), "--dist", "worksteal"] if workers else []
    command = [sys.executable, "-m", "pytest", "-p", "suite_cpu_plugin", "-q"]
    command += ["-p", "no:cacheprovider", *spread, *paths]
    before, started, at = _waited_cpu(), time.monotonic(), time.time()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall, cpu = time.monotonic() - started, _waited_cpu() - before
    rows: list[Row] = []
    spans: list[Span] = []
    for part in sorted(folder.glob("rows.json.*")):
        worker = part.suffix[1:]
        for name, spent, took, began in json.loads(part.read_text()):
            rows.append((name, float(spent), float(took)))
            spans.append((worker, began - at, began - at + took, name))
        part.unlink()
    _print_failures(done.stdout)
    return wall, cpu, rows, done.returncode, spans


def _print_failures(output: str) -> None:
    """The tests that failed, and the xdist workers that died under a test, as pytest said."""
    for line in output.splitlines():
        if line.startswith(("FAILED", "ERROR")) or "crashed while running" in line:
            print(line, flush=True)


XDIST = "exec(eval(sys.stdin"
"""An xdist worker's command line (`python -c`), and that of each child it forks."""
KINDS = (
    ("launchers.forkserver", "fork servers (their warm-ups)"),
    ("-m workers.llm_worker", "ticks started cold"),
    ("opencode", "OpenCode"),
    ("claude", "Claude Code"),
    ("chrom", "Chromium and its driver"),
    ("bin/tickwork", "`tickwork` commands, fresh interpreters"),
    (XDIST, "xdist workers"),
)
"""A process's kind by its command line, first match."""
FORKS = {"launchers.forkserver": "ticks forked warm", XDIST: "forked commands"}
"""A forked child keeps its parent's command line: what a fork server or a worker forked.

An xdist worker is a child of pytest itself: a process with its command line elsewhere is
one a worker forked, whatever its parent now (a forked command's own child outliving it).
"""


Watched = tuple[str, str, float]
"""A process's kind, the test its worker ran when it was first seen ("" before any) and CPU."""


def by_process(paths: list[str], workers: int, folder: Path) -> tuple[float, int, list[Watched]]:
    """One pytest run watched from outside: wall seconds, exit code, and each process seen.

    A process is named by the test its xdist worker ran when the process was first seen
    (every quarter of a second): a fork server, a forked command or tick keeps no test's
    name of its own. A process started by exec in a test's last moment may be charged to
    the worker's next test. The tests that failed, and any worker that died, are printed.
    """
    current = folder / "current"
    current.mkdir()
    (folder / "suite_cpu_current.py").write_text(CURRENT_PLUGIN, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(folder), "SUITE_CPU_CURRENT": str(current)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    command += ["-p", "suite_cpu_current", "-n", str(workers), "--dist", "worksteal", *paths]
    started = time.monotonic()
    output = folder / "pytest.out"
    with output.open("w", encoding="utf-8") as written:
        pytest = subprocess.Popen(command, stdout=written, stderr=subprocess.STDOUT, env=env)
    root = psutil.Process(pytest.pid)
    seen: dict[tuple[int, float], Watched] = {}
    while pytest.poll() is None:
        for child in root.children(recursive=True):
            try:
                with child.oneshot():
                    times, key = child.cpu_times(), (child.pid, child.create_time())
                    if key in seen:
                        kind, test, _ = seen[key]
                    else:
                        parent = child.parent()
                        above = parent.cmdline() if parent else []
                        from_pytest = parent is not None and parent.pid == root.pid
                        kind = _kind(child.cmdline(), above, from_pytest)
                        test = _current_test(child, current)
                    seen[key] = (kind, test, times.user + times.system)
            except psutil.Error:
                continue
        time.sleep(0.25)
    _print_failures(output.read_text(encoding="utf-8", errors="replace"))
    return time.monotonic() - started, pytest.returncode, list(seen.values())


def _current_test(process: psutil.Process, current: Path) -> str:
    """The test the xdist worker at or above `process` is running ("" outside any test)."""
    for above in [process, *process.parents()]:
        named = current / str(above.pid)
        if named.exists():
            return named.read_text(encoding="utf-8")
    return ""


def _print_by_process(paths: list[str], workers: int, top: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wall, code, watched = by_process(paths, workers, Path(tmp))
    cpu: dict[str, float] = {}
    count: Counter[str] = Counter()
    by_test: dict[tuple[str, str], list[float]] = {}
    for kind, test, spent in watched:
        cpu[kind] = cpu.get(kind, 0.0) + spent
        count[kind] += 1
        if test:
            by_test.setdefault((kind, test), []).append(spent)
    print(f"pytest {wall:.1f} s wall, exit {code}; CPU seen {sum(cpu.values()):.1f} s")
    print("| process | count | CPU s |")
    print("| --- | --- | --- |")
    for kind, spent in sorted(cpu.items(), key=lambda item: -item[1]):
        print(f"| {kind} | {count[kind]} | {spent:.1f} |")
    if top:
        print(f"The {top} costliest (process kind, test) pairs:")
        ranked = sorted(by_test.items(), key=lambda item: -sum(item[1]))[:top]
        for (kind, test), spent in ranked:
            print(f"  {sum(spent):6.1f} s {len(spent):3d}x {kind}: {test}")


def _kind(cmdline: list[str], parent: list[str], from_pytest: bool) -> str:
    line, above = " ".join(cmdline), " ".join(parent)
    for marker, kind in KINDS:
        if marker in line:
            forked = marker in above or (marker == XDIST and not from_pytest)
            return FORKS[marker] if marker in FORKS and forked else kind
    return "other: " + (cmdline[0].rsplit("/", 1)[-1] if cmdline else "?")


def _waited_cpu() -> float:
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return waited.ru_utime + waited.ru_stime


def _timeline(spans: list[Span], workers: int) -> None:
    """Where the wall went: the wait for the first test, the busy workers, the tail."""
    if not spans:
        print("no test ran: nothing to place on a timeline")
        return
    first = min(span[1] for span in spans)
    last = max(span[2] for span in spans)
    print(f"first test at {first:.1f} s, last end at {last:.1f} s")
    buckets = []
    for start in range(0, int(last) + 1, 10):
        busy = sum(
            min(end, start + 10) - max(began, start)
            for _, began, end, _ in spans
            if began < start + 10 and end > start
        )
        buckets.append(f"{start}: {busy / 10:.1f}")
    print(f"workers busy per 10 s (of {workers}): " + ", ".join(buckets))
    ends: dict[str, float] = {}
    for worker, _, end, _ in spans:
        ends[worker] = max(end, ends.get(worker, 0.0))
    print("each worker's end: " + ", ".join(f"{w} {end:.1f} s" for w, end in sorted(ends.items())))
    alone = min(ends.values())
    print(f"tests still running after {alone:.1f} s, when the first worker ran out:")
    for worker, began, end, name in sorted(spans, key=lambda span: span[1]):
        if end > alone + 1:
            print(f"  {worker} {began:6.1f}-{end:6.1f} s {name}")


def _top(rows: list[Row], count: int) -> None:
    for name, spent, took in sorted(rows, key=lambda row: -row[1])[:count]:
        print(f"|   {name} | | {spent:.2f} | {took:.1f} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=0, help="the N costliest tests (and files)")
    parser.add_argument("--workers", type=int, default=0, help="all files in one pytest -n N")
    parser.add_argument("--rows", type=Path, help="write every test's (id, CPU s, wall s) here")
    parser.add_argument("--processes", action="store_true", help="CPU by kind of process")
    parser.add_argument(
        "--timeline", action="store_true", help="with --workers: where the wall went"
    )
    args = parser.parse_args()
    print(describe())
    if args.processes:
        _print_by_process(args.files, args.workers or 4, args.top)
        return
    if not (args.timeline and args.workers):
        print("| file | tests | CPU s | wall s | exit |")
        print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "suite_cpu_plugin.py").write_text(PLUGIN, encoding="utf-8")
        if args.workers:
            wall, cpu, rows, code, spans = measure(args.files, folder, args.workers)
            if args.timeline:
                print(f"pytest {wall:.1f} s wall, {cpu:.1f} s CPU, exit {code}")
                _timeline(spans, args.workers)
                return
            if args.rows:
                args.rows.write_text(json.dumps(rows, indent=0), encoding="utf-8")
            in_tests = sum(row[1] for row in rows)
            print(f"| {' '.join(args.files)} | {len(rows)} | {cpu:.1f} | {wall:.1f} | {code} |")
            print(
                f"CPU in tests {in_tests:.1f} s, outside (start, collection) {cpu - in_tests:.1f} s"
            )
            files: dict[str, list[float]] = {}
            for name, spent, took in rows:
                tally = files.setdefault(name.split("::", 1)[0], [0, 0.0, 0.0])
                tally[0] += 1
                tally[1] += spent
                tally[2] += took
            costliest = sorted(files.items(), key=lambda item: -item[1][1])[: args.top]
            for path, (count, spent, took) in costliest:
                print(f"| {path} | {count:.0f} | {spent:.1f} | {took:.1f} | |")
            _top(rows, args.top)
            return
        for path in args.files:
            wall, cpu, rows, code, _ = measure([path], folder, 0)
            cpu = sum(row[1] for row in rows)
            print(f"| {path} | {len(rows)} | {cpu:.1f} | {wall:.1f} | {code} |", flush=True)
            _top([(name.split("::", 1)[1], spent, took) for name, spent, took in rows], args.top)


if __name__ == "__main__":
    main()
