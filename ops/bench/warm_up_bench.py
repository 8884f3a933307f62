"""Fork server warm-up benchmark: what one costs, by what its levels need preloaded.

Every `tickwork run` (each restart, each code change, each reload adding a protocol)
spawns a fork server whose warm-up imports the SDKs, agent CLIs and tools its levels use
and runs one throwaway tick; the test suite starts about fifty. Each set below is warmed
in a fresh interpreter (bytecode cached, as an installed wheel's is) as the server warms
(`forkserver.warm_up`: the collector off, the heap frozen), `--runs` times;
printed: the median CPU of the warm-up (import of the worker included), the server's
peak RSS, the modules it holds, and whether Alembic, `mcp` (the package of Strands' vended
tools imports it; a tick takes its two tools alone) and each SDK were loaded.

    .venv/bin/python ops/bench/warm_up_bench.py [--runs 5] [--against OLD_CHECKOUT]

`--against` warms an older checkout's worker beside them in the same run (its
`warm_up()` without arguments preloaded everything; the collector on), as the anchor.
"""

from __future__ import annotations

import argparse
import json
import os
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
if sys.argv[1:] == ["--old"]:
    import workers.llm_worker as worker
    worker.warm_up()
else:
    from harness.execution.launchers.forkserver import warm_up
    warm_up("workers.llm_worker", frozenset(sys.argv[1:]))
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


def warm(names: list[str], tree: Path = ROOT) -> WarmUp:
    """Warm in a fresh interpreter; `tree` other than ROOT: that checkout's code, old API."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    args = names if tree == ROOT else ["--old"]
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=tree, capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        sys.exit(f"the warm-up of {names} failed:\n{done.stderr}")
    return WarmUp(**json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", type=Path)
    args = parser.parse_args()
    print(describe())
    print(f"{'preloaded':50} {'CPU s':>6} {'RSS MiB':>8} {'modules':>8}  loaded")
    sets = [(label, names, ROOT) for label, names in SETS.items()]
    if args.against is not None:
        sets.append((f"{args.against} (everything)", [], args.against.resolve()))
    for label, names, tree in sets:
        warm(names, tree)  # writes the bytecode and the cached migrated store
        runs = [warm(names, tree) for _ in range(args.runs)]
        cpu = statistics.median(r.cpu for r in runs)
        rss = statistics.median(r.rss for r in runs)
        loaded = ", ".join(runs[-1].loaded)
        print(f"{label:50} {cpu:6.2f} {rss:8.0f} {runs[-1].modules:>8}  {loaded}")


if __name__ == "__main__":
    main()
