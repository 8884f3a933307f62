"""The line every benchmark prints first, so a figure is never read without its machine."""

from __future__ import annotations

import os
import platform
import subprocess
import time

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
