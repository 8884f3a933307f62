"""Usage shapes the gateways get wrong, booked to the token and priced to the cent-fraction.

Each shape the fake can send (`Step`: cached input reported in a stream's last event,
cache writes split by duration beside server-side web searches, usage only in Anthropic's
`message_delta`, reasoning tokens, no usage at all) is sent on every wire protocol where
it exists, and booked by each path that books a call: a Strands tick's spend hook, over
its provider's real SDK (which always streams), and an agent CLI's tick governor, streamed
and not. Each booked `BudgetSpent` must hold every part the upstream billed (its ledger)
and cost, under a price card the test sets, what the parts cost by hand.

Both paths run in this process against one fake over real sockets: the spend hook inside
a Strands agent of its own, the governor serving requests sent as a CLI sends them. Their
events are kept in memory (`Kept`), as the booking, not the store, is under test; the
real ticks that book these shapes into a store are `test_providers`' (one per protocol)
and `test_call_booking`'s (one per agent CLI).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from strands import Agent

from harness.config import PriceOverride
from harness.contracts import APIS, BASE_URL_ENV, Api, BudgetSpent, TickEvent, TickPayload
from harness.devtools.fake_llm import FakeUpstream, LedgerEntry, Step
from harness.governor import (
    ChatUsageScanner,
    MessagesUsageScanner,
    ResponsesUsageScanner,
    UsageScanner,
    priced_apart,
)
from harness.prices import PriceBook
from tests import web
from tests.waiting import wait_until
from workers.agents.tick_governor import TickGovernor, TickGovernorServer
from workers.budget_guard import BudgetGuard
from workers.model import Target, build_model
from workers.recorder import EventRecorder
from workers.spend import SpendMeter
from workers.tool_budget import ToolBudget

MODEL = "shape-model"
DAY = "2026-12-01"
CARD = PriceOverride(
    input_per_mtok=3,
    output_per_mtok=15,
    cache_read_per_mtok=0.3,
    cache_write_per_mtok=3.75,
    cache_write_1h_per_mtok=6,
    web_search_usd=0.01,
)
"""The price card the test sets (`[prices."shape-model"]`), Anthropic's Sonnet rates."""
PRICES = PriceBook({MODEL: CARD})
CACHING: tuple[Api, ...] = ("openai-chat", "openai-responses", "anthropic")
"""The protocols that report a prompt cache and reasoning (Ollama reports neither)."""


@dataclass(frozen=True)
class Shape:
    """A usage shape: the step that sends it, where it exists, and the parts it must book."""

    step: Step
    apis: tuple[Api, ...]
    shows: tuple[str, ...]
    """The parts that must be non-zero where the protocol reports them."""
    streamed_only: bool = False


SHAPES = {
    "cached_input_in_the_last_event": Shape(
        Step(cache_read_tokens=40, late_usage=True), CACHING, ("cache_read_tokens",)
    ),
    "cache_writes_beside_a_server_tool": Shape(
        Step(cache_write_tokens=30, cache_write_1h_tokens=12, web_search_requests=2),
        CACHING,
        ("cache_write_tokens", "cache_write_1h_tokens", "web_search_requests"),
    ),
    "usage_only_in_message_delta": Shape(
        Step(cache_read_tokens=20, late_usage=True),
        ("anthropic",),
        ("cache_read_tokens",),
        streamed_only=True,
    ),
    "reasoning_tokens": Shape(
        Step(thinking="Weigh the pager against the queue before answering."),
        CACHING,
        ("reasoning_tokens",),
    ),
    "no_usage": Shape(Step(omit_usage=True), APIS, ()),
}
PARTS = (
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "cache_write_1h_tokens",
    "web_search_requests",
)
SPLIT_ONLY_BY_ANTHROPIC = ("cache_write_1h_tokens", "web_search_requests")


def cases(paths: tuple[Api, ...], streams: tuple[bool, ...]) -> list[Any]:
    """(shape, api, streamed) for each shape on each protocol of the path where it exists."""
    return [
        pytest.param(name, api, streamed, id=f"{name}-{api}-{'stream' if streamed else 'whole'}")
        for name, shape in SHAPES.items()
        for api in shape.apis
        if api in paths
        for streamed in streams
        if streamed or not shape.streamed_only
    ]


class Kept(EventRecorder):
    """The tick's events, kept in order instead of stored."""

    def __init__(self, payload: TickPayload) -> None:
        super().__init__(payload)
        self.events: list[TickEvent] = []

    def record(self, event: Any) -> None:
        self.events.append(event)

    def record_all(self, events: list[TickEvent]) -> None:
        self.events.extend(events)

    def spent(self) -> list[BudgetSpent]:
        return [e for e in self.events if isinstance(e, BudgetSpent)]


def payload(tmp_path: Path, tick_id: str, api: Api) -> TickPayload:
    return TickPayload(
        tick_id=tick_id,
        level="min",
        prompt="p",
        model=MODEL,
        api=api,
        max_tool_calls=1,
        result_path=tmp_path / "r.json",
        store_url=f"sqlite:///{tmp_path}/e.db",
        spool_dir=tmp_path / "spool",
    )


def by_hand(spent: BudgetSpent) -> float:
    """The call's USD under `CARD`, written out: every part at its own rate."""
    read, written = spent.cache_read_tokens or 0, spent.cache_write_tokens or 0
    hour = spent.cache_write_1h_tokens or 0
    uncached = spent.prompt_tokens - read - written
    per_mtok = (
        uncached * 3 + read * 0.3 + (written - hour) * 3.75 + hour * 6
    ) + spent.completion_tokens * 15
    return per_mtok / 1_000_000 + (spent.web_search_requests or 0) * 0.01


def priced(spent: BudgetSpent) -> float | None:
    """The call's USD as tickwork prices it."""
    return PRICES.cost(
        spent.model,
        DAY,
        -1,
        spent.prompt_tokens,
        spent.completion_tokens,
        spent.cache_read_tokens or 0,
        spent.cache_write_tokens or 0,
        cache_write_1h_tokens=spent.cache_write_1h_tokens or 0,
        web_searches=spent.web_search_requests or 0,
    )


def holds_the_bill(shape: Shape, api: Api, spent: BudgetSpent, bill: LedgerEntry) -> None:
    """Booked as billed, each part; or, without usage, estimated and flagged; priced right."""
    assert spent.model == MODEL and bill.model == MODEL
    if not bill.usage_reported:
        assert spent.estimated and spent.prompt_tokens > 0
        assert all(getattr(spent, part) is None for part in PARTS), spent
    else:
        assert not spent.estimated
        assert (spent.prompt_tokens, spent.completion_tokens) == (
            bill.prompt_tokens,
            bill.completion_tokens,
        )
        for part in PARTS:
            assert (getattr(spent, part) or 0) == getattr(bill, part), part
        for part in shape.shows:
            if api == "anthropic" or part not in SPLIT_ONLY_BY_ANTHROPIC:
                assert getattr(spent, part), (part, spent)
    assert priced(spent) == pytest.approx(by_hand(spent), abs=1e-9)


@pytest.mark.parametrize(("name", "api", "streamed"), cases(APIS, (True,)))
def test_a_strands_tick_books_each_usage_shape_part_by_part(
    tmp_path: Path,
    fake: FakeUpstream,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    api: Api,
    streamed: bool,
) -> None:
    shape, tick_id = SHAPES[name], f"worker-{name}-{api}"
    monkeypatch.setenv(BASE_URL_ENV[api], fake.base_url(api))
    tick = payload(tmp_path, tick_id, api)
    kept = Kept(tick)
    meter = SpendMeter(tick, kept)
    model = meter.use(build_model(tick), None)
    fake.script(tick_id, [shape.step])
    Agent(model=model, hooks=[meter], callback_handler=None)("Anything for me?")
    [spent] = kept.spent()
    [bill] = [e for e in fake.ledger if e.key == tick_id]
    assert bill.stream
    holds_the_bill(shape, api, spent, bill)


GOVERNED: tuple[Api, ...] = ("anthropic", "openai-chat")
"""The protocols agent CLIs talk through their tick's governor (Claude Code, OpenCode)."""


@contextmanager
def governed(tmp_path: Path, fake: FakeUpstream, tick_id: str, api: Api) -> Iterator[Any]:
    """A tick governor serving on loopback, its events kept: (origin, client key, kept)."""
    tick = payload(tmp_path, tick_id, api)
    kept = Kept(tick)
    target = Target(api, MODEL, None, fake.base_url(api), None)
    budget = ToolBudget(tick.max_tool_calls)
    proxy = TickGovernor(tick, kept, target, None, budget, BudgetGuard(tick, kept), lambda: None)
    server = TickGovernorServer(proxy)
    origin = server.start()
    try:
        yield origin, server.client_key, kept
    finally:
        server.stop()


def cli_request(api: Api, origin: str, key: str, streamed: bool) -> httpx.Response:
    """The call an agent CLI sends, streamed or not, read whole."""
    messages = [{"role": "user", "content": "Anything for me? " * 20}]
    if api == "anthropic":
        body = {"model": MODEL, "max_tokens": 512, "messages": messages, "stream": streamed}
        return web.post(f"{origin}/v1/messages", json=body, headers={"x-api-key": key})
    body = {"model": MODEL, "messages": messages, "stream": streamed}
    if streamed:
        body["stream_options"] = {"include_usage": True}
    headers = {"authorization": f"Bearer {key}"}
    return web.post(f"{origin}/v1/chat/completions", json=body, headers=headers)


@pytest.mark.parametrize(("name", "api", "streamed"), cases(GOVERNED, (True, False)))
def test_an_agent_clis_governor_books_each_usage_shape_part_by_part(
    tmp_path: Path, fake: FakeUpstream, name: str, api: Api, streamed: bool
) -> None:
    shape, tick_id = SHAPES[name], f"cli-{name}-{api}-{streamed}"
    fake.script(tick_id, [shape.step])
    with governed(tmp_path, fake, tick_id, api) as (origin, key, kept):
        assert cli_request(api, origin, key, streamed).status_code == 200
        [spent] = wait_until(kept.spent, "the call's spend to be booked")
    [bill] = [e for e in fake.ledger if e.key == tick_id]
    assert bill.stream is streamed
    holds_the_bill(shape, api, spent, bill)


def test_hour_long_cache_writes_and_web_searches_are_priced_as_genai_prices_prices_them() -> None:
    """The rates of the parts priced apart, from genai-prices, match its own arithmetic."""
    from genai_prices import Usage, calc_price

    usage = Usage(input_tokens=10_000, cache_read_tokens=4000, cache_write_tokens=1000)
    usage.output_tokens, usage.cache_write_1h_tokens, usage.web_searches = 500, 400, 3
    expected = float(calc_price(usage, "claude-sonnet-4-5").total_price)
    cost = PriceBook().cost(
        "claude-sonnet-4-5",
        DAY,
        -1,
        10_000,
        500,
        4000,
        1000,
        cache_write_1h_tokens=400,
        web_searches=3,
    )
    assert cost == pytest.approx(expected)


ODD = {"cache_creation": {"ephemeral_1h_input_tokens": "12"}, "server_tool_use": [2]}
"""A gateway's parts that are no counts: a string, a list where an object belongs."""


@pytest.mark.parametrize(
    ("scanner", "document"),
    [
        (
            MessagesUsageScanner,
            {
                "type": "message",
                "usage": {"input_tokens": 10, "output_tokens": 4, **ODD},
                "content": [],
            },
        ),
        (
            ChatUsageScanner,
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 10,
                    "completion_tokens": 4,
                    "completion_tokens_details": {"reasoning_tokens": -3},
                    "prompt_tokens_details": "none",
                },
            },
        ),
        (
            ResponsesUsageScanner,
            {
                "object": "response",
                "usage": {
                    "input_tokens": 10,
                    "output_tokens": 4,
                    "input_tokens_details": None,
                    "output_tokens_details": {"reasoning_tokens": True},
                },
            },
        ),
    ],
)
def test_a_part_that_is_no_count_is_unreported_and_the_tokens_still_booked(
    scanner: type[UsageScanner], document: dict[str, Any]
) -> None:
    watching = scanner(False)
    watching.feed(orjson.dumps(document))
    usage = watching.finish()
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (10, 4)
    assert priced_apart(usage) == dict.fromkeys(priced_apart(None))
