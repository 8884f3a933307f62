"""How a tick process is started: a cold spawn today, a warm fork server later."""

from harness.execution.launchers.base import Launcher, TickProcess
from harness.execution.launchers.cold import ColdLauncher

__all__ = ["ColdLauncher", "Launcher", "TickProcess"]
