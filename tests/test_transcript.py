"""What a tick did: its model calls and transcript, recorded as they happen and redacted."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import sqlalchemy as sa

from harness.contracts.events import TRANSCRIPT_ITEM_CHARS, LevelPaused, level_stream
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.projections import tick_story
from harness.rag import build_index
from harness.store.schema import events as events_table
from harness.store.tick_rows import compact
from tests.tick_support import SECRET, Harness, calls
from workers.model import provider_of


def test_a_ticks_model_calls_and_transcript_are_complete_redacted_and_capped(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "oncall.md").write_text(
        f"# On call\n\nPager: escalate database alerts to Ana. {SECRET}"
    )
    build_index(notes, tmp_path / "rag.db")
    harness = Harness(
        tmp_path, fake, prompt=f"Check the pager with {SECRET}.", instructions="Be brief."
    )
    long_answer = "A" * (TRANSCRIPT_ITEM_CHARS + 1000)
    outcome = harness.tick(
        [
            Step(status=429, error_message="Incorrect API key provided: {key}"),
            calls("rag_lookup"),
            Step(text=long_answer),
        ]
    )
    assert outcome.status == "completed", outcome.reason
    events = harness.events(outcome)
    assert SECRET not in json.dumps([e.data for e in events])

    called = [e.data for e in events if e.type == "ModelCalled"]
    spent = {str(e.event_id): e.data for e in events if e.type == "BudgetSpent"}
    assert [c["call"] for c in called] == [1, 2, 3]
    refused, tooling, answered = called
    assert refused["attempt"] == 1 and refused["error_class"] == "ModelThrottledException"
    assert refused["failure_class"] == "infrastructure" and refused["budget_event_id"] is None
    assert refused["prompt_tokens"] == 0 and "[redacted:OPENAI_API_KEY]" in refused["error"]
    assert (tooling["attempt"], tooling["stop_reason"]) == (2, "tool_use")
    assert refused["wait_ms"] == answered["wait_ms"] == 0
    assert tooling["wait_ms"] >= 1000, "the retry is sent after the SDK's 1 s backoff"
    host = fake.url.split("://")[1].split("/")[0]
    assert {c["provider"] for c in called} == {host}
    assert (answered["attempt"], answered["stop_reason"]) == (1, "end_turn")
    for call in (tooling, answered):
        assert call["model"] == "fake-model" and call["error_class"] is None
        assert 0 < call["first_token_ms"] <= call["duration_ms"]
        linked = spent[call["budget_event_id"]]
        assert linked["prompt_tokens"] == call["prompt_tokens"] > 0
    assert len(spent) == 2, "a refused call is not billed"

    entries = [e.data for e in events if e.type == "TranscriptEntry"]
    assert [e["kind"] for e in entries] == ["system", "prompt", "tool", "assistant"]
    system, prompt, tool, assistant = entries
    assert system["text"] == "Be brief."
    assert prompt["text"] == "Check the pager with [redacted:OPENAI_API_KEY]."
    assert (tool["tool"], tool["status"]) == ("rag_lookup", "ok")
    assert json.loads(tool["arguments"]) == {"question": "pager"}
    assert "escalate database alerts to Ana. [redacted:OPENAI_API_KEY]" in tool["text"]
    assert assistant["cut_chars"] == 1000
    assert assistant["text"] == "A" * TRANSCRIPT_ITEM_CHARS + "\n[… 1,000 chars cut]"

    story = tick_story(harness.store, outcome.tick_id)
    assert story is not None and story.ended_by == "TickCompleted"
    # Three calls in its steps; the refused one was never billed, and model calls count
    # what was booked, in every view (`harness.projections.calls`).
    assert (story.status, story.model_calls, story.model) == ("completed", 2, "fake-model")
    assert len([s for s in story.steps if s.kind == "model_call"]) == 3
    assert story.result_text == long_answer
    assert [s.kind for s in story.steps] == [
        "scheduled",
        "started",
        "system",
        "prompt",
        "model_call",
        "model_call",
        "tool",
        "model_call",
        "assistant",
        "ended",
    ]
    assert story.steps[4].summary.startswith("model call 1 fake-model: ModelThrottledException")
    assert f"({host}, " in story.steps[4].summary
    retried = story.steps[5].summary
    assert retried.startswith("model call 2 attempt 2 fake-model: tool_use, ") and host in retried
    assert f"sent after a {tooling['wait_ms']:,.0f} ms wait" in retried

    pause = LevelPaused(level="min", reason="ends the log: the tick's end is not last")
    harness.store.append(level_stream("min"), [pause.to_record()])
    assert compact(harness.store) == 1, "the ended tick is packed"
    with harness.store.read_transaction() as conn:
        stored = conn.execute(
            sa.select(sa.func.count()).where(events_table.c.type == "TranscriptEntry")
        ).scalar()
    assert stored == 0, "its entries left the events table for its packed row"
    assert harness.events(outcome) == events, "the stream reads as it did, entries in place"
    assert tick_story(harness.store, outcome.tick_id) == story


def test_a_calls_provider_is_its_endpoints_host_never_its_credentials() -> None:
    keyed = httpx.URL(f"https://ops:{SECRET}@gw.example.com:8443/v1?key={SECRET}")
    assert provider_of(keyed) == "gw.example.com:8443"
    assert provider_of(httpx.URL("https://api.openai.com/v1")) == "api.openai.com"
