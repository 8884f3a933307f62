"""Starting a manual tick in a process of its own, for a caller that does not wait for it.

`tickwork tick --no-wait` and the dashboard's run-now button both start `tickwork tick
LEVEL --tick-id ID` detached: the tick runs in the executor's manual lane with the
lifecycle of every tick (pause, budget, caps, cancel), owned by that process, and the
caller only learns its id.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path


def start_detached(
    level: str,
    tick_id: str,
    *,
    config: Path | None,
    prompt: str | None = None,
    timeout: float | None = None,
    force: bool = False,
) -> subprocess.Popen[bytes]:
    """Start `tickwork tick` for one tick in a new session; a thread reaps it when it ends.

    A long-lived caller (`tickwork serve`) would otherwise keep every ended tick as a zombie.
    """
    command = [sys.executable, "-m", "harness.cli"]
    if config is not None:
        command += ["--config", str(config)]
    command += ["tick", level, "--wait", "--tick-id", tick_id]
    if prompt is not None:
        command += ["--prompt", prompt]
    if timeout is not None:
        command += ["--timeout", str(timeout)]
    if force:
        command.append("--force")
    process = subprocess.Popen(
        command,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    threading.Thread(target=process.wait, name=f"reap-{tick_id}", daemon=True).start()
    return process
