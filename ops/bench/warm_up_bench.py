"""Fork server warm-up benchmark: what one costs, by what its levels need preloaded.

Every `tickwork run` (each restart, each code change, each reload adding a protocol)
spawns a fork server whose warm-up imports the SDKs, agent CLIs and tools its levels use
and runs one throwaway tick; the test suite starts about fifty. Each set below is warmed
in a fresh interpreter (bytecode cached, as an installed wheel's is), `--runs` times;
printed: the median CPU of the warm-up (import of the worker included), the server's
peak RSS, the modules it holds, and whether Alembic, `mcp` (Strands' vended tools import
it) and each SDK were loaded.

    .venv/bin/python ops/bench/warm_up_bench.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from machine import describe

ROOT = Path(__file__).resolve().parents[2]

SETS = {
    "text-only OpenAI level": ["openai-chat"],
    "OpenAI level with a shell": ["openai-chat", "shell", "file_editor"],
    "Anthropic level": ["anthropic"],
    "everything (a routing catalog; the old warm-up)": [
        "openai-chat",
        "openai-responses",
        "anthropic",
        "ollama",
        "claude-code",
        "opencode",
        "shell",
        "file_editor",
        "web_fetch",
    ],
}

PROBE = """
import json, resource, sys, time
start = time.process_time()
import workers.llm_worker as worker
worker.warm_up(frozenset(sys.argv[1:]))
cpu = time.process_time() - start
watched = ("alembic", "mcp", "openai", "anthropic", "ollama")
print(json.dumps({
    "cpu": cpu,
    "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "modules": len(sys.modules),
    "loaded": [name for name in watched if name in sys.modules],
}))
"""


@dataclass
class WarmUp:
    cpu: float
    rss: float
    modules: int
    loaded: list[str]


def warm(names: list[str]) -> WarmUp:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"the warm-up of {names} failed:\n{done.stderr}")
    return WarmUp(**json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(describe())
    print(f"{'preloaded':50} {'CPU s':>6} {'RSS MiB':>8} {'modules':>8}  loaded")
    for label, names in SETS.items():
        warm(names)  # writes the bytecode and the cached migrated store
        runs = [warm(names) for _ in range(args.runs)]
        cpu = statistics.median(r.cpu for r in runs)
        rss = statistics.median(r.rss for r in runs)
        loaded = ", ".join(runs[-1].loaded)
        print(f"{label:50} {cpu:6.2f} {rss:8.0f} {runs[-1].modules:>8}  {loaded}")


if __name__ == "__main__":
    main()
