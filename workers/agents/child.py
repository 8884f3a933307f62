"""An agent CLI as a child of the tick process: isolated, minimal, read line by line, killable.

The child runs in the tick's own process group (the runner's deadline and cancel signal
the whole group), in its working folder, with `HOME` pointing at a folder of the tick's
own and only the variables it needs. Its stdin is a file (the prompt, which a pipe the
child does not drain yet could block). Its stdout is read one line at a time, as it
prints them; its stderr goes to a file beside them, for the tick's error. `kill` ends its
whole tree (the shells and tools it started, wherever their own process group) with
psutil, so nothing of it outlives the tick.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import psutil

BASE_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ", "TMPDIR")
"""What a CLI child takes of the tick's environment besides what its module gives it."""
KILL_WAIT_SECONDS = 5.0
MAX_LINE_BYTES = 16 * 1024 * 1024
"""A longer line is no event of the CLI: read as a malformed one, not into memory whole."""


def minimal_env(home: Path, extra: Mapping[str, str]) -> dict[str, str]:
    """The child's whole environment: a few of the tick's, its own `HOME`, and `extra`."""
    env = {name: os.environ[name] for name in BASE_VARIABLES if os.environ.get(name)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["HOME"] = str(home)
    env["XDG_CONFIG_HOME"] = str(home / ".config")
    env["XDG_CACHE_HOME"] = str(home / ".cache")
    env["XDG_DATA_HOME"] = str(home / ".local" / "share")
    env["XDG_STATE_HOME"] = str(home / ".local" / "state")
    env.update(extra)
    return env


class CliChild:
    """A started CLI: its lines as they come, and its end (waited for, or forced)."""

    def __init__(
        self, argv: list[str], env: dict[str, str], cwd: Path, stdin: Path, stderr: Path
    ) -> None:
        self.stderr_path = stderr
        with stdin.open("rb") as given, stderr.open("wb") as errors:
            self.process = subprocess.Popen(
                argv,
                stdin=given,
                stdout=subprocess.PIPE,
                stderr=errors,
                cwd=cwd,
                env=env,
                close_fds=True,
            )
        self.killed = False

    @property
    def pid(self) -> int:
        """The CLI's process id."""
        return self.process.pid

    def lines(self) -> Iterator[bytes]:
        """Each line the CLI prints, as soon as it is printed, until its stdout closes."""
        assert self.process.stdout is not None
        while line := self.process.stdout.readline(MAX_LINE_BYTES):
            yield line

    def wait(self) -> int:
        """The CLI's exit code, once it ended (its stdout closed first)."""
        return self.process.wait()

    def stderr_tail(self, chars: int = 2000) -> str:
        """The end of what the CLI wrote on stderr."""
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """End the CLI and every process it started, at once (SIGKILL), and reap the CLI."""
        self.killed = True
        kill_tree(self.process.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(KILL_WAIT_SECONDS)


PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> None:
    """Make this process the reaper of its orphaned descendants (Linux; else nothing).

    A CLI's tools start processes in sessions of their own, and a background one outlives
    the CLI: reparented here instead of to init, it stays in this process's tree, where
    `kill_descendants` finds it when the tick ends.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def kill_descendants() -> None:
    """SIGKILL every process this one started, and theirs (the tick ends: nothing stays)."""
    kill_tree(os.getpid(), include_root=False)


def kill_tree(pid: int, include_root: bool = True) -> None:
    """SIGKILL `pid` and all its descendants (found before the first dies, so none escape)."""
    try:
        root = psutil.Process(pid)
        tree = root.children(recursive=True)
        if include_root:
            tree = [root, *tree]
    except psutil.Error:
        return
    for process in tree:
        with contextlib.suppress(psutil.Error):
            process.send_signal(signal.SIGKILL)
    psutil.wait_procs(tree, timeout=KILL_WAIT_SECONDS)
