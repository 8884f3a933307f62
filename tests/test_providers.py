"""Every wire protocol a tick can talk is metered, capped and classed as OpenAI chat is.

One parametrised matrix over the four protocols (`api` of the level), each tick a real
worker process talking the protocol's real SDK, through Strands, to the fake upstream.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from genai_prices import Usage, calc_price
from strands.types.content import Messages
from strands.types.tools import ToolSpec

from harness.contracts.events import TERMINAL_TYPES
from harness.contracts.payload import TickPayload
from harness.contracts.wire import APIS, BASE_URL_ENV, Api
from harness.devtools.fake_llm import FakeUpstream, LedgerEntry, Step, ToolCallSpec
from harness.execution.runner import TickOutcome
from harness.governor.estimate import wire_request_chars
from harness.prices import PriceBook
from harness.store import StoredEvent
from tests.tick_support import SECRET, Harness, live_in_group
from tests.waiting import long_enough, wait_until
from workers.failures import failure_class, failure_message
from workers.model import build_model


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


def of_type(events: list[StoredEvent], kind: str) -> list[dict[str, object]]:
    return [dict(e.data) for e in events if e.type == kind]


def billed(fake: FakeUpstream, tick_id: str) -> list[LedgerEntry]:
    return [e for e in fake.ledger if e.key == tick_id]


PARTS = (
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cache_write_1h_tokens",
    "web_search_requests",
)
"""The parts of a call's usage each `BudgetSpent` keeps, as the fake's ledger names them."""


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
            for part in PARTS if entry.api != "ollama" else ():  # Ollama's counts have no parts
                assert (booked[part] or 0) == getattr(entry, part), part


@pytest.mark.parametrize("api", APIS)
def test_a_tick_books_thinking_tools_cache_and_usage_parts_from_the_protocols_own_usage(
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
        cache_write_1h_tokens=2,
        web_search_requests=1,
        late_usage=True,
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
    parts = (spent["cache_read_tokens"], spent["cache_write_tokens"], spent["reasoning_tokens"])
    assert parts == ((None, None, None) if api == "ollama" else (7, 3, entry.reasoning_tokens))
    split = (spent["cache_write_1h_tokens"], spent["web_search_requests"])
    assert split == ((2, 1) if api == "anthropic" else (None, None))
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
def test_each_protocols_faults_are_infrastructure_and_calls_without_usage_are_estimated(
    tmp_path: Path, fake: FakeUpstream, api: Api
) -> None:
    harness = Harness(tmp_path, fake, api=api)
    harness.settings = harness.settings.model_copy(
        update={"runner": harness.settings.runner.model_copy(update={"infra_retries": 8})}
    )
    harness.runner.settings = harness.settings
    faults = [*FAULTS, Step(status=529)] if api == "anthropic" else FAULTS
    outcome = harness.tick([*faults, Step(text="Recovered.", omit_usage=True)])
    events = harness.events(outcome)
    assert outcome.result is not None and outcome.result.ok, outcome
    called = of_type(events, "ModelCalled")
    failed = [c for c in called if c["error_class"]]
    assert {c["failure_class"] for c in failed} == {"infrastructure"}
    assert len(called) == len(failed) + 1
    assert of_type(events, "ToolCalled") == []  # the unfinished turn's call never ran
    ledger = billed(fake, outcome.tick_id)
    assert [e.usage_reported for e in ledger] == [False, False, False]  # cut, unfinished, none
    spend_matches_ledger(events, ledger)
    if api == "anthropic":
        assert "OverloadedError" in {c["error_class"] for c in failed}


SLOW = Step(text="too late", delay=120)
"""An answer that comes long after any cancel or timeout of these tests."""

Stopped = tuple[Harness, TickOutcome]


def cancelled_in_flight(tmp_path: Path, fake: FakeUpstream, api: Api) -> Stopped:
    """Cancelled by the runner once its call has reached the upstream, as an operator's is."""
    harness = Harness(tmp_path, fake, api=api)
    prepared = harness.preparer.prepare("min", timeout=60)
    tick_id = prepared.payload.tick_id
    fake.script(tick_id, [SLOW])
    outcomes: list[TickOutcome] = []
    thread = threading.Thread(target=lambda: outcomes.append(harness.runner.run(prepared)))
    thread.start()
    wait_until(lambda: tick_id in fake.state.first_request, "the call to reach the upstream")
    assert harness.runner.cancel(tick_id, "operator said stop")
    thread.join(60)
    return harness, outcomes[0]


def timed_out_in_flight(tmp_path: Path, fake: FakeUpstream, api: Api) -> Stopped:
    """Timed out while its call waits for the upstream; a slow start gets a longer timeout."""

    def timed(timeout: float) -> Stopped:
        folder = tmp_path / f"{timeout:g}s"  # a store of its own: a timeout pauses the level
        folder.mkdir()
        harness = Harness(folder, fake, api=api).without_retries()
        return harness, harness.tick([SLOW], timeout)

    def call_started(attempt: Stopped) -> bool:
        harness, outcome = attempt
        return any(e.type == "ModelCallStarted" for e in harness.events(outcome))

    return long_enough(timed, call_started, first=2, cap=32)


STOPS: dict[str, tuple[Callable[[Path, FakeUpstream, Api], Stopped], str]] = {
    "cancelled": (cancelled_in_flight, "TickCancelled"),
    "timed_out": (timed_out_in_flight, "TickTimedOut"),
}


@pytest.mark.parametrize("stop", STOPS)
@pytest.mark.parametrize("api", APIS)
def test_a_call_in_flight_cut_off_by_cancel_or_timeout_is_booked_estimated(
    tmp_path: Path, fake: FakeUpstream, api: Api, stop: str
) -> None:
    stopped, terminal = STOPS[stop]
    harness, outcome = stopped(tmp_path, fake, api)
    assert outcome.status == stop, outcome
    events = harness.events(outcome)
    assert [e.type for e in events if e.type in TERMINAL_TYPES] == [terminal]
    assert len(of_type(events, "ModelCallStarted")) == 1
    spent = of_type(events, "BudgetSpent")
    assert [s["estimated"] for s in spent] == [True], "the call cut off is booked, estimated"
    # Its worker books it in the grace, with the call's record; the runner books a call
    # whose worker had no time to from its start alone.
    assert spent[0]["source"] in ("worker", "runner")
    assert len(of_type(events, "ModelCalled")) == (spent[0]["source"] == "worker")
    started = next(e for e in events if e.type == "TickStarted")
    assert live_in_group(started.data["pid"]) == []


def payload_for(tmp_path: Path, api: Api, effort: str | None = None) -> TickPayload:
    return TickPayload(
        tick_id="t-1",
        level="min",
        prompt="p",
        model="m",
        api=api,
        effort=effort,  # type: ignore[arg-type]
        max_tool_calls=1,
        result_path=tmp_path / "r.json",
        store_url=f"sqlite:///{tmp_path}/e.db",
        spool_dir=tmp_path / "spool",
    )


@pytest.mark.parametrize(
    ("api", "effort", "sent"),
    [
        ("openai-chat", "xhigh", {"reasoning_effort": "xhigh"}),
        ("openai-responses", "minimal", {"reasoning": {"effort": "minimal", "summary": "auto"}}),
        ("anthropic", "high", {"thinking": {"type": "enabled", "budget_tokens": 16_384}}),
        ("anthropic", "max", {"max_tokens": 8192 + 63_999}),
        ("ollama", "low", {"think": "low"}),
        ("ollama", "none", {"think": False}),
    ],
)
def test_effort_becomes_each_protocols_own_parameter(
    tmp_path: Path, api: Api, effort: str, sent: dict[str, object]
) -> None:
    model = build_model(payload_for(tmp_path, api, effort))
    request = model.request_form([{"role": "user", "content": [{"text": "hi"}]}], [], None)
    assert {key: request.get(key) for key in sent} == sent


@pytest.mark.parametrize("api", ["anthropic", "openai-responses", "ollama"])
def test_an_endpoint_of_another_kind_is_named_and_infrastructure(
    tmp_path: Path, fake: FakeUpstream, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BASE_URL_ENV[api], fake.origin + "/api/tags")
    model = build_model(payload_for(tmp_path, api))

    async def call() -> None:
        async for _ in model.stream([{"role": "user", "content": [{"text": "hi"}]}]):
            pass

    with pytest.raises(Exception) as raised:
        asyncio.run(call())
    assert failure_class(raised.value) == "infrastructure"
    assert "404 to POST /api/tags/" in failure_message(raised.value)
    assert f"is the target's base_url an {api} endpoint" in failure_message(raised.value)


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "gpt-5"])
def test_cache_tokens_are_priced_as_the_provider_bills_them(model: str) -> None:
    """Prompt tokens include the cache in tickwork's books, whatever the protocol said."""
    usage = Usage(input_tokens=10_000, cache_read_tokens=4000, cache_write_tokens=1000)
    usage.output_tokens = 500
    expected = float(calc_price(usage, model).total_price)
    assert PriceBook().cost(model, "2026-11-01", -1, 10_000, 500, 4000, 1000) == pytest.approx(
        expected
    )


@pytest.mark.parametrize("api", APIS)
def test_the_governor_measures_the_request_in_the_protocols_own_form(
    tmp_path: Path, api: Api
) -> None:
    """System prompt, messages and tool schemas all count, wherever the protocol puts them."""
    model = build_model(payload_for(tmp_path, api))
    messages: Messages = [{"role": "user", "content": [{"text": "hi"}]}]
    spec: ToolSpec = {"name": "t", "description": "d" * 500, "inputSchema": {"json": {}}}
    bare = wire_request_chars(api, model.request_form(messages, [], None))
    system = wire_request_chars(api, model.request_form(messages, [], "s" * 1000))
    tools = wire_request_chars(api, model.request_form(messages, [spec], None))
    longer: Messages = [{"role": "user", "content": [{"text": "h" * 1000}]}]
    assert system - bare >= 1000 and tools - bare >= 500
    assert wire_request_chars(api, model.request_form(longer, [], None)) - bare >= 990


@pytest.mark.parametrize("api", APIS)
def test_an_upstream_refusal_is_told_in_the_upstreams_own_words_not_as_a_dict(
    tmp_path: Path, fake: FakeUpstream, api: Api
) -> None:
    said = "this model does not take tools named like that"
    harness = Harness(tmp_path, fake, api=api).without_retries()
    outcome = harness.tick([Step(status=400, error_message=said)])
    assert outcome.result is not None and outcome.result.error is not None
    assert outcome.result.error.message == f"the upstream answered 400: {said}"
    failed = of_type(harness.events(outcome), "TickFailed")
    assert [str(event["reason"]).split(": ", 1)[1] for event in failed] == [
        f"the upstream answered 400: {said}"
    ]
