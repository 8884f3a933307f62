"""One line per ended tick for a service's log: how it ended, how long, what it cost, said.

`tickwork run` prints it for every tick it ran and for every tick started by hand or
from the dashboard on its store (`harness.scheduling.log_feed`), so the foreground log
answers "what did it do" without a second command.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.contracts import (
    TERMINAL_TYPES,
    BudgetSpent,
    ResultFileError,
    StoredEvent,
    TickAttemptFailed,
    TickCompleted,
    TickScheduled,
    TickStarted,
    read_result,
)
from harness.prices import PriceBook, format_usd

EXCERPT_CHARS = 80
ATTEMPT_CHARS = 60
ERROR_CLASS = re.compile(r"^[A-Za-z]+(Error|Exception): ")


def tick_line(events: Sequence[StoredEvent], prices: PriceBook) -> str:
    """`<tick> <status> (<reason>)[ after N attempts (<earlier ends>)]: <duration>, …`.

    `…`: `<tokens> tokens, $<cost> — "<excerpt>"`. From the tick's whole stream (a few
    dozen events); the result file is read for a completed tick's text only. A tick that
    never started has no duration; a retried one's runs from its first attempt's start.
    """
    first, terminal = events[0], events[-1]
    tick_id = str(first.data.get("tick_id", "?"))
    status = terminal.type.removeprefix("Tick").lower() if terminal.type in TERMINAL_TYPES else "?"
    status = {"timedout": "timed_out"}.get(status, status)
    reason = terminal.data.get("reason")
    parts = [f"{tick_id} {status}" + (f" ({reason})" if reason else "") + _attempts(events)]
    started = next((e for e in events if e.type == TickStarted.type), None)
    facts = []
    if started is not None:
        took = _at(terminal) - _at(started)
        facts.append(f"{took.total_seconds():.1f} s")
    spent = [e.data for e in events if e.type == BudgetSpent.type]
    tokens = sum(d["prompt_tokens"] + d["completion_tokens"] for d in spent)
    facts.append(f"{tokens:,} tokens")
    if spent:
        facts.append(_cost(spent, prices))
    if first.type == TickScheduled.type and first.data.get("manual"):
        facts.append("by hand")
    line = parts[0] + ": " + ", ".join(facts)
    excerpt = _excerpt(terminal) if terminal.type == TickCompleted.type else None
    return line + (f' — "{excerpt}"' if excerpt else "")


def _attempts(events: Sequence[StoredEvent]) -> str:
    """` after N attempts (how each earlier one ended)`, for a tick tried more than once."""
    earlier = [e.data for e in events if e.type == TickAttemptFailed.type]
    if not earlier:
        return ""
    ends = ", ".join(_attempt_end(data["reason"]) for data in earlier)
    return f" after {len(earlier) + 1} attempts ({ends})"


def _attempt_end(reason: str) -> str:
    """An earlier attempt's end in a few words: `timed out`, else its reason, cut short.

    The exception's class that a reason may start with (`InternalServerError: `) goes:
    the words after it say what happened.
    """
    if reason.startswith("timed out"):
        return "timed out"
    flat = ERROR_CLASS.sub("", " ".join(reason.split()))
    return flat if len(flat) <= ATTEMPT_CHARS else flat[: ATTEMPT_CHARS - 1] + "…"


def _at(event: StoredEvent) -> datetime:
    return datetime.fromisoformat(event.data["occurred_at"])


def _cost(spent: list[dict[str, Any]], prices: PriceBook) -> str:
    """The calls' USD, `unpriced` when any call's model has no price."""
    total = 0.0
    for data in spent:
        model, prompt, day = data["model"], data["prompt_tokens"], data["occurred_at"][:10]
        cost = prices.cost(
            model,
            day,
            prices.tier(model, day, prompt),
            prompt,
            data["completion_tokens"],
            data.get("cache_read_tokens") or 0,
            data.get("cache_write_tokens") or 0,
        )
        if cost is None:
            return "unpriced"
        total += cost
    return f"${format_usd(total)}"


def _excerpt(terminal: StoredEvent) -> str | None:
    """The start of a completed tick's text, on one line."""
    path = terminal.data.get("result_path")
    if not path:
        return None
    try:
        text = read_result(Path(path)).text or ""
    except ResultFileError:
        return None
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[: EXCERPT_CHARS - 1] + "…"
