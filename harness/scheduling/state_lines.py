"""One line per state change for a service's log, in the tick lines' form.

A tick line reads `<tick> <status> (<reason>): <facts>`; a level paused, resumed or over
its budget, a cancel scope, a backfill or a budget crossing reads the same way:
`<subject> <what> (<why>): by <who>, <what to do next>`. The operator who watches the
log sees what tickwork decided on their behalf and what others asked, whichever
process recorded it, and how to undo it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC

from harness.contracts import (
    BackfillCancelled,
    BackfillRequested,
    BudgetCrossed,
    BudgetProjected,
    CancelCleared,
    CancelRequested,
    Event,
    LevelBudgetExceeded,
    LevelPaused,
    LevelResumed,
    RawEvent,
)

STATE_TYPES = frozenset(
    kind.type
    for kind in (
        LevelPaused,
        LevelResumed,
        CancelRequested,
        CancelCleared,
        BackfillRequested,
        BackfillCancelled,
        BudgetCrossed,
        BudgetProjected,
        LevelBudgetExceeded,
    )
)
"""The events a line tells; a backfill's running and finished lines come from its runner."""


def state_line(event: Event | RawEvent, levels: Collection[str]) -> str | None:
    """The event's line; None for a cancel tickwork asked itself (its ticks' lines tell it).

    `levels`: the configured ones, to tell a level's lasting cancel scope from a tick's.
    """
    if isinstance(event, LevelPaused):
        return _paused(event)
    if isinstance(event, LevelResumed):
        why = f" ({event.reason})" if event.reason else ""
        return f"{event.level} resumed{why}: by {event.by}"
    if isinstance(event, CancelRequested):
        if event.why is not None:
            return None
        if event.scope not in levels:
            return f"cancel {event.scope} requested: by {event.by}; its ticks in flight stop"
        return (
            f"cancel {event.scope} requested: by {event.by}; its ticks stop until "
            f"`tickwork cancel --clear {event.scope}`"
        )
    if isinstance(event, CancelCleared):
        return f"cancel {event.scope} cleared: by {event.by}"
    if isinstance(event, BackfillRequested):
        start, end = (when.astimezone(UTC) for when in (event.start, event.end))
        return (
            f"backfill {event.backfill_id} requested ({event.level}, {event.slots} slot(s) "
            f"from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC, "
            f"{event.max_at_once} at once): by {event.by}; stop it with "
            f"`tickwork cancel --backfill {event.backfill_id}`"
        )
    if isinstance(event, BackfillCancelled):
        return f"backfill {event.backfill_id} cancelled: by {event.by}"
    if isinstance(event, BudgetCrossed):
        return _crossed(event)
    if isinstance(event, BudgetProjected):
        return _projected(event)
    if isinstance(event, LevelBudgetExceeded):
        return (
            f"{event.level} over its daily budget ({event.day} UTC): "
            f"{_spent(event.spent_tokens, event.spent_usd)}; its slots are skipped `budget` "
            "until the next UTC day"
        )
    return None


def _paused(event: LevelPaused) -> str:
    """Who paused the level and why, and the command that resumes it."""
    note = f', note "{event.note}"' if event.note else ""
    return (
        f"{event.level} paused ({event.reason}): by {event.by}{note}; no tick starts until "
        f"`tickwork resume {event.level}`"
    )


def _crossed(event: BudgetCrossed) -> str:
    """How far the budget's window went, and what its action does now."""
    used = [f"{event.used_tokens:,}" + _of(event.limit_tokens, "{:,}") + " tokens"]
    if event.used_usd is not None:
        used.append(f"${event.used_usd:.4f}" + _of(event.limit_usd, "${:g}"))
    line = (
        f"budget {event.budget} crossed {event.threshold:.0%} ({event.scope}, window to "
        f"{event.window_end[:16].replace('T', ' ')}): {', '.join(used)} spent"
    )
    if event.threshold < 1.0:
        return line
    return line + "; " + _action(event.action, event.levels)


def _projected(event: BudgetProjected) -> str:
    """When the budget's window will pass the threshold, while there is time to act."""
    spent = [f"{event.used_tokens:,}" + _of(event.limit_tokens, "{:,}") + " tokens"]
    projected = [f"{event.projected_tokens:,} tokens"]
    if event.used_usd is not None:
        spent.append(f"${event.used_usd:.4f}" + _of(event.limit_usd, "${:g}"))
    if event.projected_usd is not None:
        projected.append(f"${event.projected_usd:.4f}")
    what = "its limit" if event.threshold >= 1.0 else f"{event.threshold:.0%}"
    return (
        f"budget {event.budget} on course for {what} at "
        f"{event.reaches_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC ({event.scope}, window to "
        f"{event.window_end[:16].replace('T', ' ')}): {', '.join(spent)} spent, "
        f"{', '.join(projected)} by the window's end at its rate so far"
    )


def _of(limit: float | None, form: str) -> str:
    return "" if limit is None else " of " + form.format(limit)


def _action(action: str, levels: Sequence[str]) -> str:
    if action == "pause":
        paused = ", ".join(levels) or "none left to pause"
        return f"its levels are paused ({paused})"
    if action == "reroute":
        return "its targets are passed over until the window ends"
    return "its ticks stop and its slots are skipped until the window ends"


def _spent(tokens: int, usd: float | None) -> str:
    return f"{tokens:,} tokens" + (f", ${usd:.4f}" if usd is not None else "") + " spent"
