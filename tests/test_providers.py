"""Every wire protocol a tick can talk is metered, capped and classed as OpenAI chat is.

One parametrised matrix over the four protocols (`api` of the level), each tick a real
worker process talking the protocol's real SDK, through Strands, to the fake upstream.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.contracts.wire import APIS, Api
from harness.devtools.fake_llm import FakeUpstream, LedgerEntry, Step, ToolCallSpec
from harness.store import StoredEvent
from tests.tick_support import SECRET, Harness


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


def of_type(events: list[StoredEvent], kind: str) -> list[dict[str, object]]:
    return [dict(e.data) for e in events if e.type == kind]


def billed(fake: FakeUpstream, tick_id: str) -> list[LedgerEntry]:
    return [e for e in fake.ledger if e.key == tick_id]


def spend_matches_ledger(events: list[StoredEvent], ledger: list[LedgerEntry]) -> None:
    """Each booked call is one the upstream answered, to the token; the rest estimated."""
    spent = of_type(events, "BudgetSpent")
    assert len(spent) == len(ledger)
    for booked, entry in zip(spent, ledger, strict=True):
        assert booked["estimated"] is not entry.usage_reported
        if entry.usage_reported:
            assert (booked["prompt_tokens"], booked["completion_tokens"]) == (
                entry.prompt_tokens,
                entry.completion_tokens,
            )
            assert (booked["cache_read_tokens"] or 0) == entry.cache_read_tokens


@pytest.mark.parametrize("api", APIS)
def test_a_tick_books_thinking_tools_and_cache_from_the_protocols_own_usage(
    tmp_path: Path, fake: FakeUpstream, api: Api
) -> None:
    harness = Harness(tmp_path, fake, api=api, max_tool_calls=1)
    lookup = ToolCallSpec(name="rag_lookup", arguments={"question": f"key {SECRET}"})
    step = Step(
        thinking="The pager first.",
        text="Looking.",
        tool_calls=[lookup, lookup],
        cache_read_tokens=7,
        cache_write_tokens=3,
    )
    outcome = harness.tick([step])
    events = harness.events(outcome)
    assert outcome.result is not None and outcome.result.ok, outcome
    assert outcome.result.stop_reason == "tool_budget" and outcome.result.text
    assert outcome.result.tool_calls.executed == 1 and outcome.result.tool_calls.cancelled == 1
    [entry] = ledger = billed(fake, outcome.tick_id)
    assert entry.api == api and entry.usage_reported
    spend_matches_ledger(events, ledger)
    [spent] = of_type(events, "BudgetSpent")
    cached = {"ollama": (None, None), "openai-chat": (7, None)}.get(api, (7, 3))
    assert (spent["cache_read_tokens"], spent["cache_write_tokens"]) == cached
    assert len(of_type(events, "ModelCallStarted")) == len(of_type(events, "ModelCalled")) == 1
    kinds = [(e["kind"], e["text"]) for e in of_type(events, "TranscriptEntry")]
    if api in ("anthropic", "openai-responses"):
        assert ("thinking", "The pager first.") in kinds
    assert ("assistant", "Looking.") in kinds
    if api != "ollama":  # an Ollama tick holds no key it could leak
        assert SECRET not in str([e.data for e in events])
    assert outcome.result.usage.prompt_tokens == sum(e.prompt_tokens for e in ledger)


FAULTS = [
    Step(status=429),
    Step(status=500),
    Step(text="cut short " * 20, cut_stream=True),
    Step(raw_body="<html>502 Bad Gateway</html>", raw_content_type="text/html"),
    Step(text="half", tool_calls=[ToolCallSpec(name="rag_lookup")], unfinished=True),
]


@pytest.mark.parametrize("api", APIS)
def test_each_protocols_faults_are_infrastructure_and_cut_calls_are_estimated(
    tmp_path: Path, fake: FakeUpstream, api: Api
) -> None:
    harness = Harness(tmp_path, fake, api=api)
    harness.settings = harness.settings.model_copy(
        update={"runner": harness.settings.runner.model_copy(update={"infra_retries": 8})}
    )
    harness.runner.settings = harness.settings
    faults = [*FAULTS, Step(status=529)] if api == "anthropic" else FAULTS
    outcome = harness.tick([*faults, Step(text="Recovered.")])
    events = harness.events(outcome)
    assert outcome.result is not None and outcome.result.ok, outcome
    called = of_type(events, "ModelCalled")
    failed = [c for c in called if c["error_class"]]
    assert {c["failure_class"] for c in failed} == {"infrastructure"}
    assert len(called) == len(failed) + 1
    assert of_type(events, "ToolCalled") == []  # the unfinished turn's call never ran
    ledger = billed(fake, outcome.tick_id)
    assert [e.usage_reported for e in ledger] == [False, False, True]
    spend_matches_ledger(events, ledger)
    if api == "anthropic":
        assert "OverloadedError" in {c["error_class"] for c in failed}


@pytest.mark.parametrize(
    ("api", "effort", "problem"),
    [
        ("anthropic", "minimal", "effort 'minimal' is not one anthropic takes"),
        ("openai-chat", "max", "effort 'max' is not one openai-chat takes"),
        ("ollama", "xhigh", "effort 'xhigh' is not one ollama takes"),
    ],
)
def test_an_effort_the_protocol_cannot_take_is_refused_at_load(
    tmp_path: Path, api: Api, effort: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        Harness(tmp_path, FakeUpstream(), api=api, effort=effort)
