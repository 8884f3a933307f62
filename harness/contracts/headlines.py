"""One sentence per event: the fields that matter for its type, for people to read.

The tick page (`harness.api.story`) and `tickwork events` say an event the same way; a
type without a sentence here shows its first short fields, so events added later read
as something without more work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

HIDDEN_FIELDS = frozenset({"tick_id", "level", "event_id", "occurred_at"})
"""Fields every tick event has, which a line names elsewhere (its stream, its time)."""

Data = dict[str, Any]


def _ms(value: Any) -> str:
    return f"{float(value or 0):,.0f} ms"


def ended(status: str, why: str | None) -> str:
    """How a tick ended and why, the status said once: "cancelled by root@vm (scope …)".

    A cancel's reason starts with the word already ("cancelled by …"): prefixing the
    status again read "cancelled: cancelled by …".
    """
    if not why:
        return status
    return why if why.startswith(f"{status} ") else f"{status}: {why}"


HEADLINES: dict[str, Callable[[Data], str]] = {
    "TickScheduled": lambda d: (
        f"scheduled{' by hand' if d.get('manual') else ''}{' (forced)' if d.get('forced') else ''}"
        f"{' by backfill ' + str(d['backfill']) if d.get('backfill') else ''}"
        f", model {d.get('model') or 'of the level'}"
        + (f", levels revision {d['config_revision'][:12]}" if d.get("config_revision") else "")
    ),
    "TickBuffered": lambda d: (
        f"buffered ({d.get('policy')}) behind {', '.join(d.get('behind') or []) or 'nothing'}"
    ),
    "TickStarted": lambda d: (
        f"attempt {d.get('attempt', 1)} started: pid {d.get('pid')} on {d.get('host')}, "
        f"timeout {d.get('timeout_seconds') or '?'} s"
    ),
    "BudgetSpent": lambda d: (
        f"model {d.get('model')}: {d.get('prompt_tokens', 0):,} prompt + "
        f"{d.get('completion_tokens', 0):,} completion tokens"
        f"{' (estimated)' if d.get('estimated') else ''}"
    ),
    "ToolCalled": lambda d: (
        f"tool {d.get('name')}: {d.get('status')} in {_ms(d.get('duration_ms'))}"
    ),
    "RouteFallback": lambda d: (
        f"fell back from {d.get('from_target')} to {d.get('to_target') or 'nothing'}: "
        f"{d.get('reason')}"
    ),
    "TargetSelfChecked": lambda d: (
        f"self-check of {d.get('target')}: "
        f"{'passed' if d.get('passed') else 'failed: ' + str(d.get('detail'))}"
    ),
    "RoutePromoted": lambda d: (
        f"promoted from {d.get('from_target')} to {d.get('to_target')}: {d.get('reason')}"
    ),
    "TickAttemptFailed": lambda d: (
        f"attempt {d.get('attempt')} failed ({d.get('failure_class')}): {d.get('reason')}; "
        f"retry in {float(d.get('retry_in_seconds') or 0):g} s"
    ),
    "TickCompleted": lambda d: (
        f"completed (stop reason {d.get('stop_reason') or 'none'}): "
        f"{d.get('model_calls', 0)} model call(s), {d.get('tool_calls', 0)} tool call(s), "
        f"{d.get('prompt_tokens', 0):,} + {d.get('completion_tokens', 0):,} tokens"
    ),
    "TickFailed": lambda d: f"failed ({d.get('failure_class')}): {d.get('reason')}",
    "TickTimedOut": lambda d: f"timed out after {d.get('timeout_seconds')} s",
    "TickCancelled": lambda d: ended("cancelled", d.get("reason") or "no reason recorded"),
    "TickSkipped": lambda d: f"skipped: {d.get('held') or d.get('reason')}",
    "TickLost": lambda d: f"lost: {d.get('reason')}",
    "TranscriptEntry": lambda d: f"{d.get('kind')}: {_short(d.get('text'))}",
    "LevelPaused": lambda d: f"paused by {d.get('by')}: {d.get('reason')}",
    "LevelResumed": lambda d: f"resumed by {d.get('by')}",
    "CancelRequested": lambda d: f"cancel scope {d.get('scope')!r} by {d.get('by')}",
    "CancelCleared": lambda d: f"cancel scope {d.get('scope')!r} cleared by {d.get('by')}",
    "ConfigReloaded": lambda d: (
        f"levels reloaded by pid {d.get('pid')} on {d.get('host')}: "
        f"revision {str(d.get('previous_revision'))[:12]} -> {str(d.get('revision'))[:12]}"
        + "".join(
            f"; {what} {', '.join(d[what])}"
            for what in ("added", "removed", "changed", "restart")
            if d.get(what)
        )
    ),
    "LevelsRecorded": lambda d: (
        f"levels revision {str(d.get('revision'))[:12]}: {len(d.get('levels') or {})} level(s)"
    ),
    "BackfillRequested": lambda d: (
        f"backfill {d.get('backfill_id')} of {d.get('level')} by {d.get('by')}: "
        f"{d.get('slots')} slot(s) from {d.get('start')} to {d.get('end')}, "
        f"{d.get('overlap')}, at most {d.get('max_at_once')} at once"
    ),
    "BackfillCancelled": lambda d: f"backfill {d.get('backfill_id')} cancelled by {d.get('by')}",
    "BackfillFinished": lambda d: f"backfill {d.get('backfill_id')} finished",
}


def _short(text: object, chars: int = 100) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= chars else flat[: chars - 1] + "…"


def headline(type_: str, data: Data) -> str:
    """What the event says in one sentence; for a type not known here, its first short fields."""
    known = HEADLINES.get(type_)
    if known:
        return known(data)
    short = [
        f"{key} {value}"
        for key, value in data.items()
        if key not in HIDDEN_FIELDS
        and isinstance(value, str | int | float)
        and len(str(value)) < 60
    ]
    return ", ".join(short[:4])
