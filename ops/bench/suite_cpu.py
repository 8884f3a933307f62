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

    .venv/bin/python ops/bench/suite_cpu.py tests/test_archive.py tests/test_cli.py [--top 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import describe

PLUGIN = """
import json, os, resource
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
    before = _cpu()
    yield
    _rows.append((item.nodeid, _cpu() - before))


def pytest_sessionfinish(session):
    with open(os.environ["SUITE_CPU_OUT"], "w") as out:
        json.dump(_rows, out)
"""


def measure(path: str, folder: Path) -> tuple[float, float, list[tuple[str, float]], int]:
    """One file's pytest run: its wall seconds, CPU seconds, per-test CPU and exit code."""
    out = folder / "rows.json"
    env = {**os.environ, "PYTHONPATH": str(folder), "SUITE_CPU_OUT": str(out)}
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "suite_cpu_plugin",
            "-q",
            "-p",
            "no:cacheprovider",
            path,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    rows = [(name, float(cpu)) for name, cpu in json.loads(out.read_text())]
    return wall, sum(cpu for _, cpu in rows), rows, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=0, help="the N costliest tests of each file")
    args = parser.parse_args()
    print(describe())
    print("| file | tests | CPU s | wall s | exit |")
    print("| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "suite_cpu_plugin.py").write_text(PLUGIN, encoding="utf-8")
        for path in args.files:
            wall, cpu, rows, code = measure(path, folder)
            print(f"| {path} | {len(rows)} | {cpu:.1f} | {wall:.1f} | {code} |", flush=True)
            for name, spent in sorted(rows, key=lambda row: -row[1])[: args.top]:
                print(f"|   {name.split('::', 1)[1]} | | {spent:.2f} | | |")


if __name__ == "__main__":
    main()
