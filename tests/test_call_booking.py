"""Every model call booked once with its facts, whichever agent kind made it and whoever dies.

`workers.call_booking` builds the events of every call; these tests hold the kinds that
reach it through an agent CLI's tick governor to what a Strands tick keeps (its own kill
tests are in `test_tick.py`): the stop reason and first token of each call, each call
the upstream answered booked exactly once even when a process of the tick is killed
between the answer's arrival and its booking, and the runner's estimate for every call
a killed attempt left open.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest

from harness.config import RoutingConfig
from harness.contracts import (
    BudgetSpent,
    CallPrice,
    ModelCalled,
    Rates,
    RouteFallback,
    TargetSelfChecked,
    TickAttemptFailed,
    TickStarted,
)
from harness.contracts.agents import AgentKind
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.execution import Preparer
from harness.execution.cutoff import cut_off_calls
from harness.prices import PriceBook
from harness.projections import story_steps
from harness.store import open_store
from tests.store_support import migrated_sqlite
from tests.tick_support import Harness, require_cli
from workers import CallBooking, CallFacts, Refusal

KINDS: list[AgentKind] = ["claude-code", "opencode"]
BINARY = {"claude-code": "claude", "opencode": "opencode"}
"""The name of each CLI's own process, among the worker's children."""
ENDS = {"claude-code": ("tool_use", "end_turn"), "opencode": ("tool_calls", "stop")}
"""The stop reasons of a tool call's turn and of a text answer, in each CLI's protocol."""


def cli_harness(tmp_path: Path, fake: FakeUpstream, kind: AgentKind, **level: object) -> Harness:
    require_cli(kind)
    level.setdefault("timeout_seconds", 240)  # OpenCode takes seconds of CPU to start
    api = {"api": "anthropic"} if kind == "claude-code" else {}
    return Harness(tmp_path, fake, agent=kind, rag=False, tools="full", **api, **level)


def shell(kind: AgentKind, command: str) -> ToolCallSpec:
    if kind == "claude-code":
        return ToolCallSpec(name="Bash", arguments={"command": command, "description": command})
    return ToolCallSpec(name="bash", arguments={"command": command, "description": command})


@pytest.mark.parametrize("kind", KINDS)
def test_a_cli_call_records_its_stop_reason_first_token_and_usage_parts(
    tmp_path: Path, fake: FakeUpstream, kind: AgentKind
) -> None:
    harness = cli_harness(tmp_path, fake, kind)
    parts = Step(
        text="Said hello.",
        chunk_delay=0.01,
        thinking="Check the echo.",
        cache_read_tokens=5,
        cache_write_tokens=4,
        cache_write_1h_tokens=2,
        web_search_requests=1,
    )
    outcome = harness.tick([Step(tool_calls=[shell(kind, "echo hello")]), parts])
    assert outcome.status == "completed", outcome.reason
    events = harness.events(outcome)
    spent = [e.data for e in events if e.type == BudgetSpent.type][-1]
    bill = [e for e in fake.ledger if e.key == outcome.tick_id][-1]
    assert bill.reasoning_tokens and (spent["prompt_tokens"], spent["reasoning_tokens"]) == (
        bill.prompt_tokens,
        bill.reasoning_tokens,
    )
    assert (spent["cache_read_tokens"], spent["cache_write_tokens"]) == (5, 4)
    split = (2, 1) if kind == "claude-code" else (None, None)  # only Anthropic reports them
    assert (spent["cache_write_1h_tokens"], spent["web_search_requests"]) == split
    called = [e.data for e in events if e.type == ModelCalled.type]
    assert tuple(c["stop_reason"] for c in called) == ENDS[kind]
    assert all(0 <= c["first_token_ms"] <= c["duration_ms"] for c in called), called
    lines = [s.summary for s in story_steps(events) if s.summary.startswith("model call")]
    assert len(lines) == 2 and all("first token" in line for line in lines), lines
    assert lines[1].split(": ", 1)[1].startswith(ENDS[kind][1] + ", "), lines


@pytest.mark.parametrize("victim", ["cli", "worker"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_cli_call_answered_in_full_is_booked_once_when_the_tick_is_killed_before_booking(
    tmp_path: Path, fake: FakeUpstream, kind: AgentKind, victim: str
) -> None:
    """Killed between the answer's arrival and its booking, a call is booked once.

    The upstream has sent the whole answer, usage and end of turn included, and has not
    closed it (`held_open`): the tick's governor has not booked it yet when the CLI, or
    the worker holding the governor, is killed.
    """
    harness = cli_harness(tmp_path, fake, kind, content_retries=0).without_retries()
    prepared = harness.preparer.prepare("min")
    tick_id = prepared.payload.tick_id
    fake.script(tick_id, [Step(text="Answered, then held.", held_open=True)])

    def kill() -> None:
        stream = harness.store.read_stream(f"tick-{tick_id}")
        worker = next(e for e in stream if e.type == TickStarted.type).data["pid"]
        if victim == "worker":
            os.kill(worker, signal.SIGKILL)
            return
        for child in psutil.Process(worker).children():
            if BINARY[kind] in " ".join(child.cmdline()):
                child.kill()

    fake.when_answered(tick_id, kill)
    outcome = harness.runner.run(prepared)

    assert len([entry for entry in fake.ledger if entry.key == tick_id]) == 1
    events = harness.events(outcome)
    spent = [(e.data["estimated"], e.data["source"]) for e in events if e.type == BudgetSpent.type]
    booked_by = "worker" if victim == "cli" else "runner"
    assert spent == [(True, booked_by)], "the answered call is booked once, estimated"
    assert outcome.status == "failed", outcome.reason
    if victim == "cli":
        (called,) = [e.data for e in events if e.type == ModelCalled.type]
        assert called["estimated"] and called["budget_event_id"] is not None


@pytest.mark.parametrize("kind", KINDS)
def test_a_selfcheck_required_target_run_by_a_cli_is_self_checked_first(
    tmp_path: Path, fake: FakeUpstream, kind: AgentKind
) -> None:
    """A failed self-check falls back before the CLI starts; a passed one is recorded."""
    require_cli(kind)
    catalog = tmp_path / "catalog.json"
    api = "anthropic" if kind == "claude-code" else "openai-chat"
    base_url = fake.base_url("anthropic") if kind == "claude-code" else fake.url
    targets = {
        "cli": {
            "model": "cli-model",
            "execution_class": "cloud",
            "api": api,
            "agent": kind,
            "base_url": base_url,
            "selfcheck_required": True,
        },
        "spare": {"model": "spare-model", "execution_class": "cloud", "base_url": fake.url},
    }
    lane = {"rule_id": "r", "reason_codes": ["t"], "candidates": ["cli", "spare"]}
    catalog.write_text(
        json.dumps({"schema_version": 1, "targets": targets, "lanes": {"min": lane}})
    )
    harness = cli_harness(tmp_path, fake, kind).without_retries()
    # A target down is tried again at once: the second tick checks it anew.
    routing = RoutingConfig(catalog=catalog, availability_ttl_seconds=0)
    routed = harness.settings.model_copy(update={"routing": routing})
    harness.settings = harness.runner.settings = routed
    harness.preparer = Preparer(routed, harness.store, env=harness.preparer.env)

    failed = harness.tick([Step(text=" "), Step(text="Answered on the spare.")])
    assert failed.status == "completed", failed.reason
    assert failed.result is not None and failed.result.target == "spare"
    events = harness.events(failed)
    (check,) = [e.data for e in events if e.type == TargetSelfChecked.type]
    assert (check["target"], check["passed"]) == ("cli", False)
    (fallback,) = [e.data for e in events if e.type == RouteFallback.type]
    assert (fallback["from_target"], fallback["to_target"]) == ("cli", "spare")
    called = [e.model for e in fake.ledger if e.key == failed.tick_id]
    assert called == ["cli-model", "spare-model"]
    assert len([e for e in events if e.type == BudgetSpent.type]) == 2, "the check is booked"

    passed = harness.tick([Step(text="OK"), Step(text="Answered by the CLI.")])
    assert passed.status == "completed", passed.reason
    assert passed.result is not None and passed.result.target == "cli"
    events = harness.events(passed)
    checks = [
        (e.data["target"], e.data["passed"]) for e in events if e.type == TargetSelfChecked.type
    ]
    assert checks == [("cli", True)]
    assert passed.result.usage.model_calls == 2, "the check's call is the tick's"


def test_every_call_a_killed_attempt_left_open_is_booked_once_and_a_refused_one_is_not(
    tmp_path: Path,
) -> None:
    """Calls are paired by number, not by order.

    An agent CLI can send a call before the one before it is booked, so the last start is
    not the only one that may be open. Each is billed as its start says its target bills.
    """
    store = open_store(migrated_sqlite(tmp_path))
    booking = CallBooking("t1", "min", billing={"plan": "subscription"})
    refused = Refusal("Http429", "infrastructure", "the upstream rate-limited the tick (429)")
    killed = TickAttemptFailed(
        tick_id="t1",
        level="min",
        attempt=1,
        failure_class="infrastructure",
        reason="killed",
        retry_in_seconds=0,
    )
    first_attempt = [
        booking.started(1, "m", 100),
        *booking.ended(CallFacts(model="m", call=1, billed=False, refusal=refused)),
        booking.started(2, "m", 200),
        killed,
    ]
    second_attempt = [
        booking.started(1, "m", 300),
        booking.started(2, "m", 400),
        *booking.ended(CallFacts(model="m", call=1, prompt_tokens=310, completion_tokens=5)),
        booking.started(3, "m", 500, target="plan"),
    ]
    store.append("tick-t1", [e.to_record() for e in first_attempt + second_attempt])
    events = store.read_stream("tick-t1")

    booked = cut_off_calls(events, PriceBook())
    assert [(b.prompt_tokens, b.estimated, b.source, b.billing) for b in booked] == [
        (400, True, "runner", "api"),
        (500, True, "runner", "subscription"),
    ]
    again = cut_off_calls(events, PriceBook())
    assert [b.event_id for b in again] == [b.event_id for b in booked], "one id per call"
    for batch in (booked, again):
        store.append("tick-t1", [b.to_record() for b in batch])
    assert len([e for e in store.read_stream("tick-t1") if e.type == BudgetSpent.type]) == 3


CARD = CallPrice(
    model="m",
    target="t",
    source="catalog:t",
    ladder=(
        Rates(-1, 3.0, 15.0, 0.3, 3.75, cache_write_1h=6.0, web_search=0.01),
        Rates(200_000, 6.0, 22.5, 0.6, 7.5, cache_write_1h=12.0, web_search=0.01),
    ),
)
"""A price with every part a provider bills apart, and a tier above 200k input tokens."""


@pytest.mark.parametrize(
    ("prompt", "rates"),
    [(10_000, (3.0, 15.0, 0.3, 3.75, 6.0)), (300_000, (6.0, 22.5, 0.6, 7.5, 12.0))],
)
def test_a_call_is_booked_at_its_ticks_price_on_every_part_it_was_billed_on(
    prompt: int, rates: tuple[float, ...]
) -> None:
    """Every part a call is billed on is priced at its own rate, at its prompt's tier.

    Input less cache, output (reasoning within it), 5-minute and 1-hour cache writes,
    cache reads, web searches per use.
    """
    booking = CallBooking("tick", "min", prices={("m", "t"): CARD})
    facts = CallFacts(
        model="m",
        call=1,
        prompt_tokens=prompt,
        completion_tokens=2_000,
        cache_read_tokens=4_000,
        cache_write_tokens=3_000,
        cache_write_1h_tokens=1_000,
        reasoning_tokens=500,
        web_search_requests=2,
        target="t",
    )
    spent = booking.spent(facts)
    input_, output, read, write, hour = rates
    uncached = prompt - 4_000 - 3_000
    by_hand = (
        uncached * input_ + 2_000 * output + 4_000 * read + 2_000 * write + 1_000 * hour
    ) / 1e6 + 2 * 0.01
    assert spent.cost_usd == pytest.approx(by_hand, rel=1e-12)
    assert spent.price_source == "catalog:t"
    assert (spent.reasoning_tokens, spent.cache_write_1h_tokens, spent.web_search_requests) == (
        500,
        1_000,
        2,
    )
    elsewhere = booking.spent(CallFacts(model="m", call=2, prompt_tokens=5, target="other"))
    assert (elsewhere.cost_usd, elsewhere.price_source) == (None, None), "priced when read"
