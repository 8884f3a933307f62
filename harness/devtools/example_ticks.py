"""A day of completed ticks in the store of the example configuration (`tickwork init`).

What `tickwork status`, `ticks` and `show` read: the CLI's import tests and its start-up
benchmark (`ops/bench/cli_startup.py`) fill the same store the same way.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

from harness.config import load_settings
from harness.contracts import (
    BudgetSpent,
    TickCompleted,
    TickScheduled,
    TickStarted,
    tick_id_for,
    tick_stream,
)
from harness.store import open_store

PROMPT, COMPLETION = 1200, 150
"""Tokens of each model call."""


def fill_example_store(folder: Path, ticks: int, calls: int = 1) -> str:
    """`ticks` completed ticks of the `min` level, a minute apart from today's midnight UTC.

    Each made `calls` model calls. Returns the first tick's id, for `tickwork show`.
    """
    config = load_settings(folder / "tickwork.toml")
    with contextlib.chdir(folder):  # the example's store URL is relative to its folder
        store = open_store(config.store.url, durability=config.store.durability)
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    try:
        for index in range(ticks):
            at = start + timedelta(minutes=index % (24 * 60))
            tick = {"tick_id": tick_id_for("min", at, f"seed{index}"), "level": "min"}
            spent = {"prompt_tokens": PROMPT, "completion_tokens": COMPLETION}
            events = [
                TickScheduled(**tick, slot=at, model="gpt-4o-mini", occurred_at=at),
                TickStarted(**tick, pid=1, host="here", occurred_at=at),
                *(
                    BudgetSpent(**tick, **spent, model="gpt-4o-mini", occurred_at=at)
                    for _ in range(calls)
                ),
                TickCompleted(
                    **tick,
                    prompt_tokens=PROMPT * calls,
                    completion_tokens=COMPLETION * calls,
                    occurred_at=at,
                ),
            ]
            store.append(tick_stream(tick["tick_id"]), [event.to_record() for event in events])
    finally:
        store.close()
    return tick_id_for("min", start, "seed0")
