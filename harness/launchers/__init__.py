"""How a tick process is started: a cold spawn today, a warm fork server later."""

from harness.launchers.base import Launcher, TickProcess
from harness.launchers.cold import ColdLauncher

__all__ = ["ColdLauncher", "Launcher", "TickProcess"]
