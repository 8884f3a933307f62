"""The launcher contract: start a worker in its own process group, hand back a handle.

The runner owns everything after the start (deadline, signals, the result file), so a
launcher only has to give it a process whose group can be signalled as a whole.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness.files import make_private_folder


@dataclass
class TickProcess:
    """A running tick: its leader's pid is also its process group id.

    `popen` is None for a process adopted after a restart: it is not our child, so its
    end is watched by polling and its exit code is unknown (-1).
    """

    pid: int
    popen: subprocess.Popen[bytes] | None = None

    def wait(self, timeout: float | None) -> int | None:
        """Exit code, or None if still running after `timeout` seconds."""
        if self.popen is not None:
            try:
                return int(self.popen.wait(timeout))
            except subprocess.TimeoutExpired:
                return None
        try:
            psutil.Process(self.pid).wait(timeout)
        except psutil.NoSuchProcess:
            return -1
        except psutil.TimeoutExpired:
            return None
        return -1

    def alive(self) -> bool:
        """Whether the tick's process still runs (a zombie does not count)."""
        if self.popen is not None:
            return self.popen.poll() is None
        try:
            return bool(psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    def signal_group(self, signum: int) -> None:
        """Signal the tick's whole process group, so its children stop with it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signum)

    def survivors(self) -> list[int]:
        """Live processes still in the tick's group (zombies are dead already).

        A group nothing is left in, a tick's usual end, is told by one system call: the
        walk over every process of the machine (5 ms of CPU at 160 processes) is for a
        group that still holds one, if only a zombie.
        """
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass  # a member of another user's: walked as any
        alive = []
        for process in psutil.process_iter(["pid", "status"]):
            try:
                if os.getpgid(process.pid) == self.pid and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process.pid)
            except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
                continue
        return alive

    def descendants(self) -> list[psutil.Process]:
        """The tick process's whole tree now, whatever process group each member moved to.

        An agent CLI starts its tools in groups (sessions) of their own; once the tick
        process is gone they hang off init, out of reach of both its group and its tree.
        """
        try:
            tree: list[psutil.Process] = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []
        return tree

    def kill_group(self, also: list[psutil.Process] | None = None) -> None:
        """Kill whatever is left of the tick's process group, and the processes `also` names."""
        self.signal_group(signal.SIGKILL)
        for process in also or []:
            with contextlib.suppress(psutil.Error):
                process.kill()  # psutil refuses a pid that a new process has taken since


class Launcher(ABC):
    """Starts tick processes; the public `start` does the bookkeeping, `_start` the spawn."""

    def start(self, payload_json: bytes, log_path: Path, env: dict[str, str]) -> TickProcess:
        """Start a worker with the payload on its stdin and its output in `log_path`."""
        make_private_folder(log_path.parent)
        return self._start(payload_json, log_path, env)

    @abstractmethod
    def _start(self, payload_json: bytes, log_path: Path, env: dict[str, str]) -> TickProcess:
        """Do the start; the process must lead a new session (and so a new group)."""

    def preload(self, names: Iterable[str]) -> None:
        """Have what `names` need (`preloads_of`) loaded before the next starts.

        A fresh interpreter per tick imports what its tick needs: nothing to do here.
        """
        return None

    def warming(self) -> bool:
        """Whether a start now would be slower than one a moment later (a server warming)."""
        return False

    def wait_ready(self, timeout: float) -> bool:
        """Whether a start within `timeout` is as fast as this launcher's starts get."""
        return True

    @abstractmethod
    def close(self) -> None:
        """Let go of what the launcher keeps between ticks; ticks it started run on."""
