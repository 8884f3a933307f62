"""A stand-in tick worker for the launcher tests: the payload's prompt says what to do.

It has the worker module's shape (`warm_up`, `serve`, `python -m` for a cold start), so
the launchers run it exactly as they run `workers.llm_worker`, without the model.
Commands: `report` (write what the tick sees to the result path as JSON), `hold` (report,
keep a file open, and wait for `<result>.go` to appear), `raise`, `abort`, `leak` (hold
300 MB, then end normally), `exit` (leave with code 3 in the middle of writing), and
`stubborn` (ignore SIGTERM, with a child that does the same), `mutter` (say a line on
stderr, then hang).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

PRELOADED: list[str] = []
"""What the server was asked to preload: `report` shows it (a cold start was asked nothing)."""


def warm_up(preloads: frozenset[str]) -> None:
    """Nothing to import: the stand-in's server notes what it was asked and is ready at once."""
    PRELOADED.extend(sorted(preloads))


def report(result: Path) -> None:
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
    seen = {
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "sid": os.getsid(0),
        "env": dict(os.environ),
        "fds": fds,
        "random": random.random(),
        "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "preloads": PRELOADED,
    }
    partial = result.with_suffix(".partial")
    partial.write_text(json.dumps(seen))
    partial.rename(result)


def serve(raw: bytes) -> int:
    payload = json.loads(raw)
    command, result = payload["prompt"], Path(payload["result_path"])
    result.parent.mkdir(parents=True, exist_ok=True)
    if command == "report":
        report(result)
    elif command == "hold":
        with open(result.with_suffix(".secret"), "w"):
            report(result)
            go = result.with_suffix(".go")
            while not go.exists():
                time.sleep(0.02)
    elif command == "raise":
        raise RuntimeError("the stand-in crashed")
    elif command == "abort":
        os.abort()
    elif command == "leak":
        hoard = bytearray(300 << 20)
        hoard[::4096] = b"x" * len(hoard[::4096])
    elif command == "exit":
        with open(result, "w") as half:
            half.write('{"ok": ')
            half.flush()
            os._exit(3)
    elif command == "mutter":
        print("the stand-in is still thinking", file=sys.stderr, flush=True)
        signal.pause()  # hangs until the runner's signal ends it
    elif command == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
        subprocess.Popen([sys.executable, "-c", code])
        time.sleep(120)
    return 0


if __name__ == "__main__":
    sys.exit(serve(sys.stdin.buffer.read()))
