"""The line every benchmark prints first, so a figure is never read without its machine."""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil


def describe() -> str:
    return (
        f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.platform()}"
    )


def peak_rss(process: subprocess.Popen[bytes], seconds: float) -> int:
    """Bytes: the largest RSS of `process` (its children not counted).

    Sampled twice a second for `seconds` or until it ends.
    """
    watched, peak = psutil.Process(process.pid), 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        peak = max(peak, watched.memory_info().rss)
        time.sleep(0.5)
    return peak


HWM_POLL_SECONDS = 0.02


def own_peak_mib(child: subprocess.Popen[Any]) -> float:
    """A child's own peak RSS: its `VmHWM`, read until it ends (then reaped).

    Not `wait4`'s `ru_maxrss`: Linux carries the high-water mark across exec, so a child
    of this process reports this process's peak when that is larger (after the loader's
    1 GiB page cache, a 121 MiB digest read as 940 MiB). `VmHWM` belongs to the address
    space the exec made; the peak can only rise, so the last read misses at most what the
    child grew in its last HWM_POLL_SECONDS.
    """
    status, peak = Path(f"/proc/{child.pid}/status"), 0
    while child.poll() is None:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        time.sleep(HWM_POLL_SECONDS)
    return peak / 1024


def tree_peaks_mib(child: subprocess.Popen[Any]) -> tuple[float, float]:
    """A child's own peak RSS (`VmHWM`, as `own_peak_mib`) and its process tree's, until it ends.

    The tree's is the largest sum of the RSS of the child and every descendant (a
    rebuild's fold workers) seen in one sample, every HWM_POLL_SECONDS: a worker that
    lives less than that may be missed.
    """
    status, own, tree = Path(f"/proc/{child.pid}/status"), 0, 0
    watched = psutil.Process(child.pid)
    while child.poll() is None:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, psutil.Error):
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    own = max(own, int(line.split()[1]) * 1024)
            total = watched.memory_info().rss
            for each in watched.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    total += each.memory_info().rss
            tree = max(tree, total)
        time.sleep(HWM_POLL_SECONDS)
    return own / 2**20, tree / 2**20


def cached_bytecode(cache: Path) -> dict[str, str]:
    """The environment of measured commands: bytecode written to and read from `cache`.

    As an installed wheel's is. Under `PYTHONDONTWRITEBYTECODE` (set in some shells) a
    source tree without `__pycache__` compiles every module it imports on every run.
    """
    environment = {**os.environ, "PYTHONPYCACHEPREFIX": str(cache)}
    environment.pop("PYTHONDONTWRITEBYTECODE", None)
    return environment


def instructions(command: list[str], folder: Path, environment: dict[str, str]) -> int:
    """The instructions one run of `command` in `folder` executes (valgrind's callgrind).

    Some 50 times slower than the run: for a figure the load of a shared machine does
    not move, where CPU times move by a third.
    """
    callgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    done = subprocess.run(
        [*callgrind, *command],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    count = next(line for line in done.stderr.splitlines() if "Collected :" in line)
    return int(count.split()[-1])
