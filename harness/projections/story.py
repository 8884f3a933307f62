"""A tick's story: its events read as steps a person (or the dashboard) can follow.

Folded from the tick's own stream each time it is asked for, so it needs no table, is
never stale and cannot drift from the log: a tick's stream is short (capped transcript
items, one event per call) and is read by its key. The CLI (`tickwork show`) and the
dashboard read ticks through `tick_story` and `story_steps` alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict

from harness.contracts import (
    TERMINAL_TYPES,
    AgentUsageChecked,
    BudgetSpent,
    GovernorFired,
    ModelCalled,
    ModelCallStarted,
    RateLimited,
    ResultFileError,
    ResultMissingError,
    RouteFallback,
    RoutePromoted,
    StoredEvent,
    TickAttemptFailed,
    TickScheduled,
    TickStarted,
    ToolCalled,
    TranscriptEntry,
    ended,
    read_result,
    redact,
    tick_stream,
)
from harness.prices import format_usd
from harness.projections.calls import count_calls
from harness.projections.moment import TickNow, tick_now
from harness.projections.ticks import STATUS_OF, queue_wait
from harness.store import EventStore

LOG_TAIL_CHARS = 4000
"""The end of a tick's log the story keeps: where a failing tick says why."""

StepKind = Literal[
    "scheduled",
    "started",
    "system",
    "prompt",
    "thinking",
    "assistant",
    "stopped",
    "tool",
    "model_call",
    "spend",
    "fallback",
    "promoted",
    "governor",
    "rate_limited",
    "attempt_failed",
    "ended",
    "other",
]


class StoryStep(BaseModel):
    """One thing that happened in the tick, in stream order."""

    model_config = ConfigDict(defer_build=True)  # `tickwork show` builds it, not `status`

    position: int
    """The event's place in the tick's stream: a follower asks for steps after it."""
    at: datetime
    kind: StepKind
    summary: str
    """One line for people."""
    text: str | None = None
    """What was said or returned, redacted and capped when it was recorded."""
    arguments: str | None = None
    event_type: str
    data: dict[str, Any]


class TickStory(BaseModel):
    """What a tick did and how it ended, with its steps, result text and log tail."""

    model_config = ConfigDict(defer_build=True)

    tick_id: str
    level: str | None = None
    status: str = "unknown"
    ended_by: str | None = None
    reason: str | None = None
    model: str | None = None
    target: str | None = None
    attempts: int = 0
    queue_wait_seconds: float | None = None
    """From its claim to its first start (`harness.projections.ticks.queue_wait`)."""
    config_revision: str | None = None
    """The levels' revision its slot was claimed under (`harness.scheduling.reload`)."""
    model_calls: int = 0
    """Its calls and tokens, as every view gives them (`harness.projections.calls`)."""
    tool_calls: int = 0
    tool_calls_cancelled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    result_path: str | None = None
    result_text: str | None = None
    result_error: str | None = None
    log_path: str | None = None
    log_tail: str | None = None
    now: TickNow | None = None
    """Where it stands while in flight (`harness.projections.moment`); None once ended."""
    steps: list[StoryStep]

    @property
    def ended(self) -> bool:
        """Whether the tick's stream holds its terminal event."""
        return self.ended_by is not None


def tick_story(store: EventStore, tick_id: str) -> TickStory | None:
    """The story of the tick with this id; None when the store has no such tick."""
    events = store.read_stream(tick_stream(tick_id))
    if not events:
        return None
    return story_of(tick_id, events)


def story_of(tick_id: str, events: list[StoredEvent]) -> TickStory:
    """The story told by a tick's events (the whole stream, in order)."""
    story = TickStory(tick_id=tick_id, steps=story_steps(events))
    kept_tail: str | None = None
    for event in events:
        data = event.data
        story.level = data.get("level", story.level)
        story.status = STATUS_OF.get(event.type, story.status)
        if event.type == TickScheduled.type:
            story.model = data.get("model") or story.model
            story.config_revision = data.get("config_revision") or story.config_revision
        elif event.type == TickStarted.type:
            story.attempts += 1
            story.result_path = data.get("result_path") or story.result_path
            story.log_path = data.get("log_path") or story.log_path
        elif event.type == ModelCalled.type:
            story.model, story.target = data["model"], data.get("target") or story.target
        if event.type in TERMINAL_TYPES:
            story.ended_by = event.type
            kept_tail = data.get("stderr_tail") or None
            story.reason = _why(data)
            story.result_path = data.get("result_path") or story.result_path
    counts = count_calls(events)
    story.model_calls, story.prompt_tokens = counts.model_calls, counts.prompt_tokens
    story.tool_calls, story.completion_tokens = counts.tool_calls, counts.completion_tokens
    story.tool_calls_cancelled = counts.tool_calls_cancelled
    story.now = tick_now(events)
    story.queue_wait_seconds = queue_wait(
        None,
        (
            (event.type == TickStarted.type, datetime.fromisoformat(event.data["occurred_at"]))
            for event in events
            if event.type in (TickScheduled.type, TickStarted.type)
        ),
    )
    _read_files(story, kept_tail)
    return story


STOPPED = frozenset({"cancelled", "timed_out"})
"""Ends of a tick whose worker was stopped: no result file is expected, none is missed."""


def _read_files(story: TickStory, kept_tail: str | None) -> None:
    """The result's text (or why there is none) and the log's tail, where they can be read.

    A log that cannot be read (on another host, removed) leaves the tail its terminal
    event kept, if any (a failed or timed-out tick's).
    """
    if story.result_path and story.ended:
        try:
            result = read_result(Path(story.result_path))
            story.result_text = result.text
            if result.error is not None:
                story.result_error = f"{result.error.type}: {result.error.message}"
        except ResultMissingError as exc:
            if story.status not in STOPPED:
                story.result_error = str(exc)
        except ResultFileError as exc:
            story.result_error = str(exc)
    if story.log_path:
        try:
            with Path(story.log_path).open("rb") as log:
                size = log.seek(0, 2)
                log.seek(max(0, size - LOG_TAIL_CHARS))
                story.log_tail = redact(log.read().decode(errors="replace"))
        except OSError:
            story.log_tail = None
    story.log_tail = story.log_tail or kept_tail


def story_steps(events: Iterable[StoredEvent]) -> list[StoryStep]:
    """The steps of a tick's events (all of them, or those after a follower's last one).

    A `BudgetSpent` linked from a `ModelCalled`, a `ModelCallStarted` whose call ended in
    one, and a `ToolCalled` beside the transcript's tool item, say nothing new and are left
    out; a tick recorded before those events existed keeps them as its only record. A call
    that started and never ended (in flight, or cut off by a kill) stays in.
    """
    events = list(events)
    answered = _answered_starts(events)
    linked = {e.data.get("budget_event_id") for e in events if e.type == ModelCalled.type}
    spent = {str(e.event_id): e.data for e in events if e.type == BudgetSpent.type}
    transcribed_tools = any(
        e.type == TranscriptEntry.type and e.data.get("kind") == "tool" for e in events
    )
    steps = []
    for event in events:
        if event.type == BudgetSpent.type and str(event.event_id) in linked:
            continue
        if event.type == ToolCalled.type and transcribed_tools:
            continue
        if event.event_id in answered:
            continue
        step = _step(event)
        booked = spent.get(event.data.get("budget_event_id") or "")
        if booked is not None:
            step.summary += spend_parts(booked)
        steps.append(step)
    return steps


def spend_parts(data: dict[str, Any]) -> str:
    """What a `BudgetSpent` adds to its call's line: its usage parts, USD and price source.

    Spend booked before tickwork priced calls as it booked them adds its parts alone.
    """
    parts = [
        f"{data[name]:,} {label}"
        for name, label in (
            ("cache_read_tokens", "cache read"),
            ("cache_write_tokens", "cache write"),
            ("cache_write_1h_tokens", "of them 1h"),
            ("reasoning_tokens", "reasoning"),
            ("web_search_requests", "web searches"),
        )
        if data.get(name)
    ]
    text = f" [{', '.join(parts)}]" if parts else ""
    source, cost = data.get("price_source"), data.get("cost_usd")
    if source is None:
        return text
    return f"{text} = " + (source if cost is None else f"${format_usd(cost)} by {source}")


def _answered_starts(events: list[StoredEvent]) -> set[UUID]:
    """The `ModelCallStarted` events whose call has its `ModelCalled` in the same attempt.

    Call numbers count within one worker process, so they restart with each attempt.
    """
    answered: set[UUID] = set()
    pending: dict[int, UUID] = {}
    for event in events:
        if event.type == TickStarted.type:
            pending = {}
        elif event.type == ModelCallStarted.type:
            pending[event.data["call"]] = event.event_id
        elif event.type == ModelCalled.type and event.data.get("call") in pending:
            answered.add(pending.pop(event.data["call"]))
    return answered


def _step(event: StoredEvent) -> StoryStep:
    data = event.data
    kind, summary, text, arguments = _describe(event.type, data)
    return StoryStep(
        position=event.stream_position,
        at=datetime.fromisoformat(data["occurred_at"])
        if "occurred_at" in data
        else event.recorded_at,
        kind=kind,
        summary=summary,
        text=text,
        arguments=arguments,
        event_type=event.type,
        data=data,
    )


def _describe(type_: str, data: dict[str, Any]) -> tuple[StepKind, str, str | None, str | None]:
    """(kind, one-line summary, long text, tool arguments) of one event."""
    if type_ == TranscriptEntry.type:
        kind: StepKind = data["kind"]
        if kind == "tool":
            status = data.get("status") or "ok"
            return kind, f"tool {data.get('tool')} ({status})", data["text"], data.get("arguments")
        return kind, kind, data["text"], None
    if type_ == ModelCalled.type:
        return "model_call", _model_call_line(data), None, None
    if type_ == ModelCallStarted.type:
        line = (
            f"call {data['call']} to {data['model']} sent "
            f"(~{data['estimated_input_tokens']:,} input tokens), no answer recorded yet"
        )
        return "model_call", line, None, None
    if type_ == TickScheduled.type:
        how = "by hand" if data.get("manual") else "for its slot"
        return "scheduled", f"scheduled {how} (attempt {data.get('attempt', 1)})", None, None
    if type_ == TickStarted.type:
        return "started", f"started pid {data['pid']} on {data['host']}", None, None
    if type_ == BudgetSpent.type:
        tokens = f"{data['prompt_tokens']:,} + {data['completion_tokens']:,} tokens"
        estimated = " (estimated)" if data.get("estimated") else ""
        return "spend", f"{data['model']}: {tokens}{estimated}{spend_parts(data)}", None, None
    if type_ == ToolCalled.type:
        return (
            "tool",
            f"tool {data['name']} ({data['status']}, {data['duration_ms']:.0f} ms)",
            None,
            None,
        )
    if type_ == RouteFallback.type:
        to = data.get("to_target") or "no candidate left"
        return "fallback", f"fallback {data['from_target']} -> {to}: {data['reason']}", None, None
    if type_ == RoutePromoted.type:
        return "promoted", f"promoted {data['from_target']} -> {data['to_target']}", None, None
    if type_ == GovernorFired.type:
        return (
            "governor",
            f"governor {data['decision']} at ~{data['est_tokens']:,} tokens",
            None,
            None,
        )
    if type_ == AgentUsageChecked.type:
        reported = (data["reported_prompt_tokens"], data["reported_completion_tokens"])
        booked = (data["booked_prompt_tokens"], data["booked_completion_tokens"])
        told = f"{data['agent']} reported {reported[0]:,} + {reported[1]:,} tokens"
        if reported == booked:
            return "other", f"{told}, as booked", None, None
        line = f"usage MISMATCH: {told}, the ledger booked {booked[0]:,} + {booked[1]:,}"
        return "other", line, None, None
    if type_ == RateLimited.type:
        waited = f"waited {data['waited_ms']:,.0f} ms for {data['bucket']} ({data['reason']})"
        if not data.get("taken", True):
            waited += ", its turn lay past the tick's deadline: not sent"
        return "rate_limited", f"call {data['call']} {waited}", None, None
    if type_ == TickAttemptFailed.type:
        line = f"attempt {data['attempt']} failed ({data['failure_class']}): {data['reason']}"
        return "attempt_failed", line, None, None
    if type_ in TERMINAL_TYPES:
        return "ended", ended(STATUS_OF.get(type_, type_), _why(data)), None, None
    return "other", type_, None, None


def _why(data: dict[str, Any]) -> str | None:
    """Why a tick ended: what held an overlap skip's slot, else its reason or stop reason."""
    return data.get("held") or data.get("reason") or data.get("stop_reason")


def _model_call_line(data: dict[str, Any]) -> str:
    where = data["model"] + (f" via {data['target']}" if data.get("target") else "")
    timing = f"{data['duration_ms']:.0f} ms"
    if data.get("first_token_ms") is not None:
        timing += f", first token {data['first_token_ms']:.0f} ms"
    if data.get("wait_ms"):
        timing += f", sent after a {data['wait_ms']:,.0f} ms wait"
    if data.get("provider"):
        timing = f"{data['provider']}, {timing}"
    if data.get("error_class"):
        outcome = f"{data['error_class']}: {data.get('error') or ''}"
    else:
        tokens = f"{data['prompt_tokens']:,} + {data['completion_tokens']:,} tokens"
        stop = data.get("stop_reason")
        outcome = (f"{stop}, " if stop else "") + tokens
        outcome += " (estimated)" if data.get("estimated") else ""
    attempt = f" attempt {data['attempt']}" if data.get("attempt", 1) > 1 else ""
    return f"model call {data.get('call', '?')}{attempt} {where}: {outcome} ({timing})"
