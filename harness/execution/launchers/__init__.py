"""How a tick process is started: a cold spawn, or a fork from a warm server.

It owns the launcher contract (`Launcher`, `TickProcess`: start a worker in its own
process group, then wait, signal and kill that group), the cold launcher (a fresh
interpreter per tick) and the warm one (a preloaded fork server, shared by the process),
and `launcher_for`, which picks the one `[runner] launcher` names.
"""

from __future__ import annotations

import functools
import typing

if typing.TYPE_CHECKING:
    from harness.config import Settings
from harness.execution.launchers.base import Launcher, TickProcess
from harness.execution.launchers.child_exit import end_as_python_would
from harness.execution.launchers.cold import ColdLauncher
from harness.execution.launchers.warm import ForkServerError, WarmLauncher

__all__ = [
    "ColdLauncher",
    "ForkServerError",
    "Launcher",
    "TickProcess",
    "WarmLauncher",
    "end_as_python_would",
    "launcher_for",
    "shared_warm_launcher",
]


def launcher_for(settings: Settings) -> Launcher:
    """The launcher `[runner] launcher` names; the warm one is shared by the process."""
    if settings.runner.launcher == "cold":
        return ColdLauncher()
    return shared_warm_launcher()


@functools.cache
def shared_warm_launcher() -> WarmLauncher:
    """One fork server per process, whatever number of runners it holds."""
    return WarmLauncher()
