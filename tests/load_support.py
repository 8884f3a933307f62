"""A service under load: 60 levels every 5 s (720 slots a minute), a fast fake upstream.

Shared by the load test (`test_load.py`, a few seconds on PostgreSQL) and the soak
benchmark (`ops/bench/load_soak.py`, minutes on both stores and through the
procrastinate executor): the same config, and the same reading of what the run left.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.devtools.fake_llm import FakeUpstream, Step
from harness.store import SqlEventStore
from tests.procrastinate_support import EXECUTOR, Ticks
from tests.store_support import migrated_sqlite

LEVELS = 60
EVERY = "5s"
CALL_SECONDS = 0.2
"""How long the fake upstream takes over each answer."""


def load_config(
    root: Path, store_url: str = "", connections: int | None = None, procrastinate: bool = False
) -> Path:
    """The tickwork.toml of the load: `[runner] max_concurrent = 16` starting at once.

    Running ticks get a long grace at a stop, so every call a tick makes is answered and
    booked: spend can be held against the bill to the token.
    """
    pool = f"connections = {connections}" if connections else ""
    levels = "".join(
        f'[levels.l{i:02d}]\nevery = "{EVERY}"\noverlap = "allow"\nprompt = "Anything new?"\n'
        'model = "fake-model"\ntimeout_seconds = 60\n'
        for i in range(LEVELS)
    )
    executor = EXECUTOR.format(stalled=30.0) if procrastinate else ""
    config = root / "tickwork.toml"
    config.write_text(
        f'[store]\nurl = "{store_url or migrated_sqlite(root)}"\n{pool}\n'
        f'[paths]\nresults = "{root}/results"\nspool = "{root}/spool"\n'
        "[runner]\nmax_concurrent = 16\nstart_spacing_seconds = 0\n"
        f"shutdown_grace_seconds = 60\ngrace_seconds = 5\n{executor}\n{levels}"
    )
    return config


def answer_slowly(fake: FakeUpstream, calls: int) -> None:
    """Every one of the next `calls` answers takes CALL_SECONDS."""
    fake.script("default", [Step(delay=CALL_SECONDS)] * calls)


@dataclass(frozen=True)
class Load:
    """What a load run left in the store, against what the fake upstream billed."""

    ticks: int
    completed: int
    ended_once: int
    unended: int
    """Ticks with no terminal event yet (jobs still queued when the workers stopped)."""
    spent_tokens: int
    billed_tokens: int

    @classmethod
    def read(cls, store: SqlEventStore, fake: FakeUpstream) -> Load:
        ticks = Ticks.read(store)
        terminals = ticks.terminals()
        spent = sum(
            e.data["prompt_tokens"] + e.data["completion_tokens"]
            for events in ticks.of("BudgetSpent").values()
            for e in events
        )
        return cls(
            ticks=len(ticks.streams),
            completed=sum(kinds == ["TickCompleted"] for kinds in terminals.values()),
            ended_once=sum(len(kinds) == 1 for kinds in terminals.values()),
            unended=sum(not kinds for kinds in terminals.values()),
            spent_tokens=spent,
            billed_tokens=sum(e.prompt_tokens + e.completion_tokens for e in fake.ledger),
        )
