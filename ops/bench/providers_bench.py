"""A mixed run on all four wire protocols: does the recorded spend equal the upstream's bill?

Ticks on OpenAI chat, OpenAI Responses, Anthropic and Ollama (a level each, real worker
processes through the warm launcher, the SDK of each protocol) against the fake upstream,
each tick scripted with thinking, a tool round with cache reads, a rate limit, a stream
cut before its usage and a final answer. Then, per protocol, from the store and the
fake's ledger: calls the upstream answered against calls booked, tokens billed against
tokens recorded for the calls that reported usage, and the calls booked as estimated
against the calls whose usage never arrived. It exits 1 when they differ.

    .venv/bin/python ops/bench/providers_bench.py [--ticks 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from machine import describe

from harness.config import LevelConfig, PathsConfig, RunnerConfig, Settings, StoreConfig
from harness.contracts.wire import APIS
from harness.devtools.fake_llm import LedgerEntry, Step, ToolCallSpec, fake_upstream
from harness.execution.launchers import WarmLauncher
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.store import EventStore, open_store

SCRIPT = [
    Step(
        thinking="Look first.",
        tool_calls=[ToolCallSpec(name="rag_lookup", arguments={"question": "pager"})],
        cache_read_tokens=5,
    ),
    Step(status=429),
    Step(status=429),
    Step(text="cut before the usage " * 5, cut_stream=True),
    Step(text="Quiet night.", cache_write_tokens=2),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=5, help="ticks per protocol")
    args = parser.parse_args()
    print(describe())
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as folder, fake_upstream() as fake:
        root = Path(folder)
        levels = {
            api.replace("-", "_"): LevelConfig(
                every="1h", prompt="Check the pager.", model=f"{api}-model", api=api, rag=True
            )
            for api in APIS
        }
        settings = Settings(
            store=StoreConfig(url=f"sqlite:///{root}/events.db"),
            paths=PathsConfig(results=root / "results", spool=root / "spool"),
            runner=RunnerConfig(infra_retries=5, retry_backoff_seconds=0.05),
            levels=levels,
        )
        env = {
            **os.environ,
            "OPENAI_BASE_URL": fake.base_url("openai-chat"),
            "OPENAI_API_KEY": "sk-bench",
            "ANTHROPIC_BASE_URL": fake.base_url("anthropic"),
            "ANTHROPIC_API_KEY": "sk-bench",
            "OLLAMA_HOST": fake.base_url("ollama"),
        }
        store = open_store(settings.store.url)
        launcher = WarmLauncher()
        assert launcher.wait_ready(300), "the fork server did not warm up"
        preparer = Preparer(settings, store, env=env)
        runner = Runner(settings, store, launcher, env=env)
        began = time.monotonic()
        ticks: dict[str, str] = {}
        for _ in range(args.ticks):
            for level, config in levels.items():
                prepared = preparer.prepare(level)
                fake.script(prepared.payload.tick_id, SCRIPT)
                outcome = runner.run(prepared)
                assert outcome.status == "completed", outcome.reason
                ticks[outcome.tick_id] = config.api
        elapsed = time.monotonic() - began
        launcher.close()
        ok = report(store, fake.ledger, ticks)
    print(f"{len(ticks)} ticks in {elapsed:.1f} s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("every check holds" if ok else "A CHECK FAILED")
    return 0 if ok else 1


def report(store: EventStore, ledger: list[LedgerEntry], ticks: dict[str, str]) -> bool:
    """Print the table per protocol; True when the books equal the bill."""
    billed: Counter[tuple[str, str]] = Counter()
    booked: Counter[tuple[str, str]] = Counter()
    for entry in ledger:
        if entry.key in ticks:
            billed[entry.api, "calls"] += 1
            billed[entry.api, "estimated"] += not entry.usage_reported
            if entry.usage_reported:
                billed[entry.api, "prompt"] += entry.prompt_tokens
                billed[entry.api, "completion"] += entry.completion_tokens
                billed[entry.api, "cache_read"] += entry.cache_read_tokens
    for tick_id, api in ticks.items():
        for event in store.read_stream(f"tick-{tick_id}"):
            if event.type != "BudgetSpent":
                continue
            data = event.data
            booked[api, "calls"] += 1
            booked[api, "estimated"] += bool(data["estimated"])
            if not data["estimated"]:
                booked[api, "prompt"] += data["prompt_tokens"]
                booked[api, "completion"] += data["completion_tokens"]
                booked[api, "cache_read"] += data["cache_read_tokens"] or 0
    figures = ("calls", "estimated", "prompt", "completion", "cache_read")
    print(f"| protocol | {' | '.join(f'{f} billed / booked' for f in figures)} |")
    print(f"| --- |{' ---: |' * len(figures)}")
    ok = True
    for api in APIS:
        cells = [f"{billed[api, f]:,} / {booked[api, f]:,}" for f in figures]
        ok = ok and all(billed[api, f] == booked[api, f] for f in figures)
        print(f"| {api} | {' | '.join(cells)} |")
    return ok


if __name__ == "__main__":
    sys.exit(main())
