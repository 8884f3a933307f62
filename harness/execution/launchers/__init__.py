"""How a tick process is started: a cold spawn, or a fork from a warm server.

It owns the launcher contract (`Launcher`, `TickProcess`: start a worker in its own
process group, then wait, signal and kill that group), the cold launcher (a fresh
interpreter per tick) and the warm one (a preloaded fork server, shared by the process),
and `launcher_for`, which picks the one `[runner] launcher` names and tells the warm one
what the levels need preloaded (`preloads_of`).
"""

from __future__ import annotations

from harness.execution.launchers.base import Launcher, TickProcess
from harness.execution.launchers.child_exit import end_as_python_would
from harness.execution.launchers.cold import ColdLauncher
from harness.execution.launchers.configured import launcher_for, preloads_of, shared_warm_launcher
from harness.execution.launchers.warm import ForkServerError, WarmLauncher

__all__ = [
    "ColdLauncher",
    "ForkServerError",
    "Launcher",
    "TickProcess",
    "WarmLauncher",
    "end_as_python_would",
    "launcher_for",
    "preloads_of",
    "shared_warm_launcher",
]
