"""Cold start: a fresh `python -m workers.llm_worker` per tick (1.5 to 2 s of imports)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.execution.launchers.base import Launcher, TickProcess
from harness.files import open_private

WORKER_MODULE = "workers.llm_worker"


class ColdLauncher(Launcher):
    """A fresh interpreter per tick: slow to start, but nothing is shared between ticks."""

    def __init__(self, worker: str = WORKER_MODULE) -> None:
        self.worker = worker

    def argv(self) -> list[str]:
        """The tick process's command line."""
        return [sys.executable, "-m", self.worker]

    def _start(self, payload_json: bytes, log_path: Path, env: dict[str, str]) -> TickProcess:
        with open(log_path, "ab", opener=open_private) as log:
            popen = subprocess.Popen(
                self.argv(),
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        assert popen.stdin is not None
        try:
            popen.stdin.write(payload_json)
            popen.stdin.close()
        except BrokenPipeError:
            pass  # the worker died at once; its exit code and log tell why
        return TickProcess(popen.pid, popen)

    def close(self) -> None:
        """Nothing to let go: a cold launcher keeps nothing between ticks."""
