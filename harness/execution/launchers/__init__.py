"""How a tick process is started: a cold spawn, or a fork from a warm server."""

from __future__ import annotations

import functools

from harness.config import Settings
from harness.execution.launchers.base import Launcher, TickProcess
from harness.execution.launchers.cold import ColdLauncher
from harness.execution.launchers.warm import ForkServerError, WarmLauncher

__all__ = [
    "ColdLauncher",
    "ForkServerError",
    "Launcher",
    "TickProcess",
    "WarmLauncher",
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
