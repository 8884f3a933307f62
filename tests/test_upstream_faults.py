"""Broken upstream answers end a tick in the right failure class, with its spend recorded.

The fake upstream plays the faults real gateways produce: a stream cut in the middle of a
tool call, a `200` with an HTML error page, a body that is not JSON, usage that is not a
count. Each ends the tick with exactly one terminal event of the right class, no
traceback to the user, and a `BudgetSpent` for every call that was answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from strands.types.streaming import StreamEvent

from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.store import StoredEvent
from tests.tick_support import Harness
from workers.providers import UnfinishedTurnError, finished_turn

TERMINAL = {"TickCompleted", "TickFailed", "TickTimedOut", "TickCancelled"}


def ended(harness: Harness, steps: list[Step]) -> tuple[StoredEvent, list[StoredEvent]]:
    """The tick's one terminal event, and all its events."""
    events = harness.events(harness.tick(steps))
    terminal = [e for e in events if e.type in TERMINAL]
    assert len(terminal) == 1, [e.type for e in events]
    assert "Traceback" not in str(terminal[0].data.get("reason", ""))
    return terminal[0], events


def without_retries(harness: Harness) -> Harness:
    runner = harness.settings.runner.model_copy(update={"infra_retries": 0})
    harness.runner.settings = harness.settings.model_copy(update={"runner": runner})
    return harness


def test_a_stream_cut_inside_a_tool_call_is_infrastructure_and_runs_nothing(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    marker = tmp_path / "ran"
    harness = without_retries(Harness(tmp_path, fake, rag=False, can_shell=True))
    call = ToolCallSpec(name="shell", arguments={"command": f"touch {marker}"})
    terminal, events = ended(harness, [Step(tool_calls=[call], cut_after_chunks=2)])
    assert terminal.type == "TickFailed"
    assert terminal.data["failure_class"] == "infrastructure"
    assert not marker.exists(), "a half-sent tool call must never run"
    billed = [entry for entry in harness.fake.ledger if entry.key == terminal.data["tick_id"]]
    spent = [e.data for e in events if e.type == "BudgetSpent"]
    assert len(billed) == 1, "the upstream answered the call, and billed it"
    assert [s["estimated"] for s in spent] == [True], "an answered call is booked, estimated"


@pytest.mark.parametrize("with_tool_call", [True, False], ids=["tool call", "text"])
def test_a_turn_whose_stream_ends_before_its_end_is_infrastructure_and_runs_nothing(
    tmp_path: Path, fake: FakeUpstream, with_tool_call: bool
) -> None:
    """What came of a turn that never said it was over may be a prefix: none of it runs.

    The body ends cleanly, with no finish reason, usage or [DONE].
    """
    marker = tmp_path / "ran"
    harness = without_retries(Harness(tmp_path, fake, rag=False, can_shell=True))
    call = ToolCallSpec(name="shell", arguments={"command": f"touch {marker}"})
    cut = Step(tool_calls=[call], unfinished=True)
    if not with_tool_call:
        cut = Step(text="The pager is quiet, but the disk on db-2 is", unfinished=True)
    terminal, events = ended(harness, [cut, cut])
    assert terminal.type == "TickFailed"
    assert terminal.data["failure_class"] == "infrastructure", terminal.data["reason"]
    assert not marker.exists(), "a tool call of an unfinished turn must never run"
    assert not [e for e in events if e.type == "ToolCalled"]
    spent = [e.data for e in events if e.type == "BudgetSpent"]
    assert [s["estimated"] for s in spent] == [True], "the unfinished call is booked, estimated"
    assert spent[0]["completion_tokens"] > 0


START: StreamEvent = {"messageStart": {"role": "assistant"}}
TOOL: StreamEvent = {"contentBlockStart": {"start": {"toolUse": {"toolUseId": "t", "name": "x"}}}}


@pytest.mark.parametrize(
    ("events", "finished"),
    [
        ([START, TOOL, {"messageStop": {"stopReason": "tool_use"}}], True),
        ([START, TOOL, {"messageStop": {}}], False),
        ([START, TOOL], False),
    ],
    ids=["stop reason", "stop without reason", "no stop"],
)
def test_any_providers_turn_is_finished_only_by_a_stop_reason(
    events: list[StreamEvent], finished: bool
) -> None:
    """The check every provider's model shares, whatever its wire protocol.

    An Anthropic or Ollama stream that ends without its stop event is refused as an
    OpenAI one without its finish reason is.
    """

    async def drain() -> list[StreamEvent]:
        async def source() -> AsyncIterator[StreamEvent]:
            for event in events:
                yield event

        return [event async for event in finished_turn(source())]

    if finished:
        assert asyncio.run(drain()) == events
    else:
        with pytest.raises(UnfinishedTurnError):
            asyncio.run(drain())


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html"),
        ('{"id": "chatcmpl-1", "choices": [', "application/json"),
        ('data: {"id": "chatcmpl-1", "choices": [\n\n', "text/event-stream"),
    ],
    ids=["html page", "broken json", "broken sse"],
)
def test_an_answer_that_is_not_a_completion_is_infrastructure(
    tmp_path: Path, fake: FakeUpstream, body: str, content_type: str
) -> None:
    harness = without_retries(Harness(tmp_path, fake, rag=False))
    terminal, _ = ended(harness, [Step(raw_body=body, raw_content_type=content_type)])
    assert terminal.type == "TickFailed"
    assert terminal.data["failure_class"] == "infrastructure"


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "many", "completion_tokens": 3, "total_tokens": 15},
        {"prompt_tokens": 12, "completion_tokens": -3, "total_tokens": 9},
        {"prompt_tokens": None, "completion_tokens": 1.5, "total_tokens": "x"},
    ],
    ids=["string", "negative", "null and float"],
)
def test_usage_that_is_not_a_count_is_estimated_and_flagged(
    tmp_path: Path, fake: FakeUpstream, usage: dict[str, object]
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    terminal, events = ended(harness, [Step(text="All quiet.", usage=usage)])
    assert terminal.type == "TickCompleted", terminal.data
    [spent] = [e for e in events if e.type == "BudgetSpent"]
    assert spent.data["estimated"] is True
    assert spent.data["prompt_tokens"] > 0 and spent.data["completion_tokens"] > 0
