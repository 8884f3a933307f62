"""The governor proxy over real sockets: a real client, the proxy, the fake upstream.

Thresholds are small and calibration is off unless a test is about it, so a request's
estimate is exactly its size / 3.2 and each decision is known in advance.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anthropic
import httpx
import openai
import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from harness.contracts.events import GOVERNOR_STREAM
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.devtools.fake_llm.anthropic import prompt_view
from harness.governor import tokens_from_chars, wire_request_chars
from harness.store import open_store
from tests import web
from tests.governor_support import (
    HARD,
    SOFT,
    SSE_GAP_SECONDS,
    config,
    echo_app,
    governor_proxy,
    messages,
    origin_of,
    serving,
)
from tests.waiting import wait_until

SECRET = "sk-governor-test-SECRET-42"


def client(origin: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{origin}/v1", api_key=SECRET, max_retries=0)


def last_received(fake: FakeUpstream) -> dict[str, Any]:
    return fake.state.received[-1]


@pytest.mark.parametrize("stream", [False, True])
def test_pass_forwards_the_request_unchanged(fake: FakeUpstream, stream: bool) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, governor):
        sent = messages(100)
        answer = client(origin).chat.completions.create(
            model="m",
            messages=sent,
            stream=stream,
            **({"stream_options": {"include_usage": True}} if stream else {}),
        )
        text = (
            "".join(c.choices[0].delta.content or "" for c in answer if c.choices)
            if stream
            else answer.choices[0].message.content
        )  # type: ignore[union-attr]
        assert text == "All done: nothing needed attention."
        assert last_received(fake)["messages"] == sent
        assert governor.counters["pass"] == 1


@pytest.mark.parametrize("stream", [False, True])
def test_soft_appends_the_directive_as_the_last_user_message(
    fake: FakeUpstream, stream: bool
) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, governor):
        sent = messages(4000)
        answer = client(origin).chat.completions.create(model="m", messages=sent, stream=stream)
        if stream:
            assert any(chunk.choices and chunk.choices[0].finish_reason for chunk in answer)  # type: ignore[union-attr]
        forwarded = last_received(fake)["messages"]
        est = governor.recent[-1]["est_tokens"]
        assert forwarded[:-1] == sent
        assert forwarded[-1] == {"role": "user", "content": f"WRAP UP at {est} of {SOFT}"}
        assert governor.recent[-1]["decision"] == "soft"


@pytest.mark.parametrize("tail", ["tool", "assistant_tool_calls"])
def test_soft_defers_where_the_chain_forbids_a_user_message(fake: FakeUpstream, tail: str) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, governor):
        sent = messages(4000, tail)
        with web.Client() as http:
            http.post(f"{origin}/v1/chat/completions", json={"model": "m", "messages": sent})
        assert last_received(fake)["messages"] == sent
        assert governor.recent[-1]["decision"] == "defer"


def test_hard_answers_without_calling_the_model(fake: FakeUpstream) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, governor):
        billed = len(fake.ledger)
        answer = client(origin).chat.completions.create(model="m", messages=messages(7000))
        est = governor.recent[-1]["est_tokens"]
        assert answer.choices[0].message.content == f"STOPPED at {est} over {HARD} {{keep}}"
        assert answer.choices[0].finish_reason == "stop"
        assert len(fake.ledger) == billed


def test_hard_streams_its_answer_when_the_request_streams(fake: FakeUpstream) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, _):
        billed = len(fake.ledger)
        body = {
            "model": "m",
            "messages": messages(7000),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with (
            web.Client() as http,
            http.stream("POST", f"{origin}/v1/chat/completions", json=body) as response,
        ):
            assert response.headers["content-type"].startswith("text/event-stream")
            events = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]"
        chunks = [orjson.loads(line[6:]) for line in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        assert text.startswith("STOPPED at ")
        assert chunks[-1]["usage"]["prompt_tokens"] == 0
        assert len(fake.ledger) == billed


def test_hard_zero_disables_the_stop(fake: FakeUpstream) -> None:
    with governor_proxy(config(origin_of(fake), hard_tokens=0)) as (origin, governor):
        client(origin).chat.completions.create(model="m", messages=messages(50_000))
        assert governor.recent[-1]["decision"] == "soft"


def test_exempt_models_are_measured_and_calibrated_but_never_cut(fake: FakeUpstream) -> None:
    cfg = config(origin_of(fake), exempt_models=("big-context",), calibrate=True)
    with governor_proxy(cfg) as (origin, governor):
        sent = messages(9000)
        client(origin).chat.completions.create(model="gateway/vendor/big-context", messages=sent)
        assert last_received(fake)["messages"] == sent
        assert governor.recent[-1]["decision"] == "pass"
        assert governor.recent[-1]["est_tokens"] > HARD
        status = governor.status()
        assert status["calibration"]["gateway/vendor/big-context"]["samples"] == 1
        client(origin).chat.completions.create(model="other/big-context-2", messages=sent)
        assert governor.recent[-1]["decision"] == "hard"


def test_status_reports_counters_limits_calibration_and_the_last_50_decisions(
    fake: FakeUpstream,
) -> None:
    cfg = config(origin_of(fake), calibrate=True, exempt_models=("free",))
    with governor_proxy(cfg) as (origin, _):
        api = client(origin)
        for _ in range(52):
            api.chat.completions.create(model="m", messages=messages(1200))
        api.chat.completions.create(model="m", messages=messages(9000))
        status = web.get(f"{origin}/governor/status").json()
    assert status["soft_tokens"] == SOFT and status["hard_tokens"] == HARD
    assert status["exempt_models"] == ["free"]
    assert status["counters"]["pass"] == 52 and status["counters"]["hard"] == 1
    assert len(status["decisions"]) == 50
    assert status["decisions"][-1]["decision"] == "hard"
    assert status["calibration"]["m"]["samples"] == 52
    assert 3.5 <= status["calibration"]["m"]["chars_per_token"] <= 4.5  # the fake bills chars/4


def test_announcements_post_the_earlier_body_throttled_over_all_sessions(
    fake: FakeUpstream,
) -> None:
    heard: list[dict[str, Any]] = []

    async def speaker(request: Request) -> Response:
        heard.append(await request.json())
        return JSONResponse({"queued": True})

    app = Starlette(routes=[Route("/api/voice/announce", speaker, methods=["POST"])])
    with serving(app, "speaker") as speaker_origin:
        cfg = config(
            origin_of(fake),
            announce_url=f"{speaker_origin}/api/voice/announce",
            announce_text="full at {est} of {threshold}",
        )
        with governor_proxy(cfg) as (origin, governor):
            api = client(origin)
            api.chat.completions.create(model="m", messages=messages(9000))
            wait_until(lambda: governor.announcer.sent == 1, "the announcement")
            est = governor.recent[-1]["est_tokens"]
            for opening in ("another session", "a third"):
                chat = [{"role": "system", "content": opening}, *messages(4000)]
                api.chat.completions.create(model="m", messages=chat)
            status = web.get(f"{origin}/governor/status/").json()
    assert heard == [
        {
            "text": f"full at {est} of {HARD}",
            "subject": "[Governor]",
            "source": "governor",
            "priority": "normal",
        }
    ], "a second session within the throttle period announced again"
    assert status["announce"] == {"on": True, "sent": 1, "failed": 0}


def test_status_answers_as_the_earlier_governor_did(fake: FakeUpstream) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, _):
        api = client(origin)
        api.chat.completions.create(model="m", messages=messages(1200))
        usage = {"include_usage": True}
        streamed = api.chat.completions.create(
            model="m", messages=messages(1300), stream=True, stream_options=usage
        )
        assert [chunk for chunk in streamed]
        answers = [web.get(f"{origin}{path}") for path in ("/governor", "/governor/status/")]
    billed = [entry.prompt_tokens for entry in fake.ledger[-2:]]
    for answer in answers:
        status = answer.json()
        assert answer.status_code == 200 and status["ok"] is True
        assert isinstance(status["uptime_s"], int) and status["uptime_s"] >= 0
        assert status["counters"]["chat"] == 2
        assert status["counters"]["tokens_prompt"] == sum(billed)
        assert [d["exact_prompt_tokens"] for d in status["decisions"]] == billed


def test_a_client_leaving_a_stream_ends_its_relay_at_once(fake: FakeUpstream) -> None:
    fake.script("leaves", [Step(text="x" * 640, chunk_delay=2.0)])  # 80 s of chunks
    body = {"model": "m", "messages": messages(10), "stream": True}
    with governor_proxy(config(origin_of(fake))) as (origin, governor):
        started = time.monotonic()
        headers = {"X-Tickwork-Tick": "leaves"}
        url = f"{origin}/v1/chat/completions"
        with web.stream("POST", url, json=body, headers=headers) as answer:
            assert next(answer.iter_raw())
        wait_until(lambda: governor.counters["client_gone"] == 1, "the relay ending")
        assert time.monotonic() - started < 30, "the relay ran on after the client left"
        again = client(origin).chat.completions.create(model="m", messages=messages(10))
        assert again.choices[0].message.content


def test_non_chat_requests_pass_through_with_method_path_query_headers_and_body() -> None:
    with serving(echo_app(), "echo") as upstream, governor_proxy(config(upstream)) as (origin, _):
        response = web.put(
            f"{origin}/v1/files/abc?purpose=batch&x=1",
            content=b"\x00raw bytes",
            headers={
                "X-Custom": "kept",
                "Authorization": f"Bearer {SECRET}",
                "Connection": "keep-alive",
            },
        )
    echo = response.json()
    headers = {name.lower(): value for name, value in echo["headers"]}
    assert (echo["method"], echo["path"], echo["query"]) == (
        "PUT",
        "/v1/files/abc",
        "purpose=batch&x=1",
    )
    assert echo["body"] == "\x00raw bytes"
    assert headers["x-custom"] == "kept" and headers["authorization"] == f"Bearer {SECRET}"
    assert response.headers["x-upstream"] == "echo"


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"model": "m", "messages": "text"}'])
def test_malformed_chat_bodies_pass_through_untouched(body: bytes) -> None:
    with (
        serving(echo_app(), "echo") as upstream,
        governor_proxy(config(upstream)) as (origin, governor),
    ):
        response = web.post(f"{origin}/v1/chat/completions", content=body)
        assert response.status_code == 200
        assert response.json()["body"] == body.decode()
        assert governor.counters["not_json_passed_through"] == 1


def test_sse_chunks_arrive_as_the_upstream_sends_them() -> None:
    with serving(echo_app(), "echo") as upstream, governor_proxy(config(upstream)) as (origin, _):
        arrivals = []
        with web.Client() as http, http.stream("GET", f"{origin}/slow-sse") as response:
            for _ in response.iter_raw():
                arrivals.append(time.monotonic())
    gaps = [later - earlier for earlier, later in itertools.pairwise(arrivals)]
    assert len(arrivals) >= 4
    assert sum(gap >= SSE_GAP_SECONDS * 0.7 for gap in gaps) >= 3, gaps


def test_unreachable_upstream_is_a_502_that_says_so_without_credentials() -> None:
    with governor_proxy(config(f"http://user:{SECRET}@127.0.0.1:9")) as (origin, governor):
        response = web.post(
            f"{origin}/v1/chat/completions", json={"model": "m", "messages": messages(10)}
        )
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "upstream http://127.0.0.1:9 did not answer (ClientConnectorError" in message
    assert SECRET not in message and SECRET not in str(governor.status())


def test_events_land_in_the_store_without_secrets(
    fake: FakeUpstream, store_url: str, tmp_path: Path
) -> None:
    cfg = config(origin_of(fake), calibrate=True, log=tmp_path / "decisions.jsonl")
    with governor_proxy(cfg, store_url, tmp_path / "spool") as (origin, _):
        api = client(origin)
        api.chat.completions.create(model="m", messages=messages(4000))
        stream = api.chat.completions.create(
            model="m", messages=messages(1500), stream=True, stream_options={"include_usage": True}
        )
        list(stream)
        api.chat.completions.create(model="m", messages=messages(9000))
        fake.script("tick-x", [Step()])
        web.post(
            f"{origin}/v1/chat/completions",
            json={"model": "m", "messages": messages(100)},
            headers={"X-Tickwork-Tick": "tick-x"},
        )
    store = open_store(store_url)
    try:
        fired = [e.data for e in store.read_stream(GOVERNOR_STREAM) if e.type == "GovernorFired"]
        samples = [
            e.data for e in store.read_stream(GOVERNOR_STREAM) if e.type == "CalibrationSampled"
        ]
        spent = [e for e in store.read_all(types=["BudgetSpent"])]
        everything = orjson.dumps([e.data for e in store.read_all(limit=1000)]).decode()
    finally:
        store.close()
    assert [f["decision"] for f in fired] == ["soft", "hard"]
    assert len(samples) == 2 and all(s["source"] == "proxy" for s in samples)
    assert [(s.data["source"], s.data["level"], s.data["estimated"]) for s in spent] == [
        ("proxy", "proxy", False)
    ] * 2
    assert {s.data["price_source"] for s in spent} == {"unpriced"}, "booked with its price source"
    assert [s.data["prompt_tokens"] for s in spent] == [e.prompt_tokens for e in fake.ledger[-3:-1]]
    assert SECRET not in everything
    assert SECRET not in (tmp_path / "decisions.jsonl").read_text()


def test_many_concurrent_streams_are_served_at_once(fake: FakeUpstream) -> None:
    """No answer starts before all 40 requests reached the upstream through the proxy."""
    streams, text = 40, "x" * 64  # four chunks each, interleaved across the streams
    step = Step(text=text, chunk_delay=0.05, together=streams)
    fake.script("concurrent", [step] * streams)
    body = {"model": "m", "messages": messages(100), "stream": True}

    async def one(http: httpx.AsyncClient, origin: str) -> str:
        headers = {"X-Tickwork-Tick": "concurrent"}
        async with http.stream(
            "POST", f"{origin}/v1/chat/completions", json=body, headers=headers
        ) as answer:
            lines = [line async for line in answer.aiter_lines() if line.startswith("data: {")]
        return "".join(
            orjson.loads(line[6:])["choices"][0]["delta"].get("content") or "" for line in lines
        )

    async def all_at_once(origin: str) -> list[str]:
        async with web.AsyncClient(timeout=30) as http:
            return await asyncio.gather(*(one(http, origin) for _ in range(streams)))

    with governor_proxy(config(origin_of(fake))) as (origin, _):
        answers = asyncio.run(all_at_once(origin))
    assert answers == [text] * streams
    assert fake.state.arrived["concurrent"] == streams


def test_status_serves_the_earlier_governors_keys_beside_its_own(fake: FakeUpstream) -> None:
    """The earlier governor's dashboards read these keys; chat = soft + hard + passthrough."""
    with governor_proxy(config(origin_of(fake))) as (origin, _):
        before = web.get(f"{origin}/governor/status").json()
        api = client(origin)
        api.chat.completions.create(model="m", messages=messages(100))
        with web.Client() as http:
            http.post(
                f"{origin}/v1/chat/completions",
                json={"model": "m", "messages": messages(4000, "tool")},
            )
        api.chat.completions.create(model="m", messages=messages(4000))
        api.chat.completions.create(model="m", messages=messages(7000))
        status = web.get(f"{origin}/governor/status").json()
    with governor_proxy(config(origin_of(fake), hard_tokens=0)) as (origin, _):
        unbounded = web.get(f"{origin}/governor").json()
    earlier = ("chat", "soft", "hard", "passthrough", "tokens_prompt", "tokens_completion")
    assert {name: before["counters"][name] for name in earlier} == dict.fromkeys(earlier, 0)
    assert (status["soft"], status["hard"], status["calibration_default"]) == (SOFT, HARD, 3.2)
    assert unbounded["hard"] is None
    counters = status["counters"]
    assert (counters["chat"], counters["passthrough"]) == (4, 2)
    assert counters["chat"] == counters["soft"] + counters["hard"] + counters["passthrough"]
    billed = [entry.prompt_tokens for entry in fake.ledger[-3:]]
    recent = status["recent"]
    assert [r["action"] for r in recent] == ["hard", "soft", "defer", "passthrough"]
    assert [r["exact"] for r in recent] == [None, *reversed(billed)]
    assert [r["est"] for r in recent] == [d["est_tokens"] for d in reversed(status["decisions"])]
    assert all(r["model"] == "m" and isinstance(r["t"], int) for r in recent)
    assert abs(recent[0]["t"] - time.time()) < 3600


def test_status_may_be_read_from_any_origin(fake: FakeUpstream) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, _):
        answers = [web.get(f"{origin}{path}") for path in ("/governor/status", "/governor/")]
        forwarded = client(origin).chat.completions.with_raw_response.create(
            model="m", messages=messages(100)
        )
    assert [answer.headers.get("access-control-allow-origin") for answer in answers] == ["*"] * 2
    assert "access-control-allow-origin" not in forwarded.headers, "only the status is opened"


class GatedUpstream:
    """An upstream that streams its first chunk, then holds the answer until released."""

    PROMPT_TOKENS = 1234

    def __init__(self) -> None:
        self.release = threading.Event()

    def app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body = await request.json()
            if not body.get("stream"):
                error = {"error": {"message": "slow down", "type": "rate_limit"}}
                return JSONResponse(error, status_code=429)

            async def chunks() -> AsyncIterator[bytes]:
                delta = {"choices": [{"index": 0, "delta": {"content": "held"}}]}
                yield b"data: " + orjson.dumps(delta) + b"\n\n"
                await asyncio.to_thread(self.release.wait, 30)
                usage = {"prompt_tokens": self.PROMPT_TOKENS, "completion_tokens": 1}
                done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
                yield b"data: " + orjson.dumps({**done, "usage": usage}) + b"\n\n"
                yield b"data: [DONE]\n\n"

            return StreamingResponse(chunks(), media_type="text/event-stream")

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_the_log_line_is_written_when_the_answer_ends_with_the_truth_beside_the_estimate(
    tmp_path: Path,
) -> None:
    """Exact prompt tokens, streamed or not and the upstream's status, in the log alone."""
    gated = GatedUpstream()
    log_file = tmp_path / "governor.jsonl"
    with (
        serving(gated.app(), "gated") as upstream,
        governor_proxy(config(upstream, log=log_file)) as (origin, _),
        web.Client(timeout=30) as http,
    ):
        url = f"{origin}/v1/chat/completions"
        body = {"model": "m", "messages": messages(1000), "stream": True}
        with http.stream("POST", url, json=body) as answer:
            raw = answer.iter_raw()  # kept: a dropped iterator closes the connection
            assert b"held" in next(raw)
            assert log_file.read_text() == "", "the line was written before the answer ended"
            gated.release.set()
            assert b"[DONE]" in b"".join(raw)
        http.post(url, json={"model": "m", "messages": messages(1000)})
        http.post(url, json={"model": "m", "messages": messages(7000), "stream": True})
    lines = [orjson.loads(line) for line in log_file.read_text().splitlines()]
    assert [
        (line["decision"], line["exact_prompt_tokens"], line["streamed"], line["status"])
        for line in lines
    ] == [
        ("pass", GatedUpstream.PROMPT_TOKENS, True, 200),
        ("pass", None, False, 429),
        ("hard", None, True, None),
    ]
    assert [line["ended"] for line in lines] == ["answered"] * 3
    assert lines[0]["est_tokens"] == lines[1]["est_tokens"] > 0


def test_the_log_tells_a_cut_answer_and_an_unreachable_upstream(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    log_file = tmp_path / "governor.jsonl"
    fake.script("cut", [Step(cut_stream=True)])
    body = {"model": "m", "messages": messages(100), "stream": True}
    headers = {"X-Tickwork-Tick": "cut"}
    with governor_proxy(config(origin_of(fake), log=log_file)) as (origin, _):
        web.post(f"{origin}/v1/chat/completions", json=body, headers=headers)
    with governor_proxy(config("http://127.0.0.1:9", log=log_file)) as (origin, _):
        web.post(f"{origin}/v1/chat/completions", json=body)
    lines = [orjson.loads(line) for line in log_file.read_text().splitlines()]
    assert [(line["ended"], line["status"], line["streamed"]) for line in lines] == [
        ("cut", 200, True),
        ("unreachable", None, True),
    ]


# Anthropic Messages through the same governor: the real `anthropic` SDK, the fake's
# Anthropic side, real sockets.


def claude(origin: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=origin, api_key=SECRET, max_retries=0)


def claude_turns(chars: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "x" * chars}]


def ask_claude(origin: str, chars: int, stream: bool, **extra: Any) -> anthropic.types.Message:
    """One Messages call, streamed or not; the message as the SDK assembled it."""
    api = claude(origin)
    if not stream:
        return api.messages.create(
            model="claude-m", max_tokens=64, messages=claude_turns(chars), **extra
        )
    with api.messages.stream(
        model="claude-m", max_tokens=64, messages=claude_turns(chars), **extra
    ) as events:
        return events.get_final_message()


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_pass_forwards_the_request_and_reads_its_usage(
    fake: FakeUpstream, stream: bool
) -> None:
    fake.script("default", [Step(cache_read_tokens=40, cache_write_tokens=25)])
    with governor_proxy(config(origin_of(fake))) as (origin, governor):
        message = ask_claude(origin, 1200, stream, system="be brief")
        billed = fake.ledger[-1]
        assert text_of(message) == "All done: nothing needed attention."
        assert last_received(fake)["messages"] == claude_turns(1200)
        assert last_received(fake)["system"] == "be brief"
        decision = governor.recent[-1]
        assert (decision["api"], decision["decision"], decision["streamed"]) == (
            "anthropic",
            "pass",
            stream,
        )
        assert billed.api == "anthropic" and billed.cache_read_tokens == 40
        assert decision["exact_prompt_tokens"] == billed.prompt_tokens
        assert governor.counters["anthropic"] == 1


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        (None, "{d}"),
        ("be brief", "be brief\n\n{d}"),
        (
            [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            [
                {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "{d}"},
            ],
        ),
    ],
)
def test_anthropic_soft_puts_the_directive_in_the_system_prompt(
    fake: FakeUpstream, system: Any, expected: Any
) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, governor):
        ask_claude(origin, 4000, False, **({"system": system} if system else {}))
        est = governor.recent[-1]["est_tokens"]
    directive = f"WRAP UP at {est} of {SOFT}"
    forwarded = last_received(fake)
    assert forwarded["messages"] == claude_turns(4000), "no turn is added to the chain"
    assert orjson.dumps(forwarded["system"]) == orjson.dumps(expected).replace(
        b"{d}", directive.encode()
    )
    assert governor.recent[-1]["decision"] == "soft"


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_hard_answers_in_anthropics_format_without_calling_the_model(
    fake: FakeUpstream, stream: bool
) -> None:
    with governor_proxy(config(origin_of(fake))) as (origin, governor):
        billed = len(fake.ledger)
        message = ask_claude(origin, 7000, stream)
        est = governor.recent[-1]["est_tokens"]
    assert text_of(message) == f"STOPPED at {est} over {HARD} {{keep}}"
    assert message.stop_reason == "end_turn" and message.usage.input_tokens == 0
    assert len(fake.ledger) == billed


def test_count_tokens_is_the_upstreams_or_else_the_governors_estimate(fake: FakeUpstream) -> None:
    request = {"model": "claude-m", "messages": claude_turns(3200), "system": "s"}
    with governor_proxy(config(origin_of(fake))) as (origin, _):
        upstreams = claude(origin).messages.count_tokens(**request)
    assert upstreams.input_tokens == fake.state.prompt_tokens("count", prompt_view(request))[0]
    with (
        serving(Starlette(), "no count_tokens") as bare,
        governor_proxy(config(bare)) as (origin, governor),
    ):
        estimated = claude(origin).messages.count_tokens(**request)
        bad = web.post(f"{origin}/v1/messages/count_tokens", json={"model": "claude-m"})
    assert estimated.input_tokens == tokens_from_chars(wire_request_chars("anthropic", request))
    assert governor.counters["count_tokens_estimated"] == 1 and not governor.recent
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]


def test_clients_of_both_apis_share_one_governor_and_one_ledger(
    fake: FakeUpstream, tmp_path: Path
) -> None:
    """Each call's spend, cache reads and writes included, equals what the fake billed.

    A stream cut before its usage is booked at the estimate, and flagged.
    """
    store_url = f"sqlite:///{tmp_path}/events.db"
    cached = Step(cache_read_tokens=300, cache_write_tokens=200)
    fake.script("default", [Step(), cached, Step(), Step(cut_stream=True)])
    log_file = tmp_path / "decisions.jsonl"
    cfg = config(origin_of(fake), calibrate=True, log=log_file)
    with governor_proxy(cfg, store_url, tmp_path / "spool") as (origin, governor):
        client(origin).chat.completions.create(model="m", messages=messages(1500))
        ask_claude(origin, 1500, False)
        ask_claude(origin, 1600, True)
        with pytest.raises(anthropic.APIStatusError):
            ask_claude(origin, 1700, True)
        cut_estimate = governor.recent[-1]["est_tokens"]
        status = web.get(f"{origin}/governor/status").json()
    store = open_store(store_url)
    try:
        spent = [e.data for e in store.read_all(types=["BudgetSpent"])]
        samples = [
            e.data for e in store.read_stream(GOVERNOR_STREAM) if e.type == "CalibrationSampled"
        ]
        everything = orjson.dumps([e.data for e in store.read_all(limit=1000)]).decode()
    finally:
        store.close()
    billed = fake.ledger[-4:-1]
    assert [
        (s["model"], s["prompt_tokens"], s["completion_tokens"], s["estimated"]) for s in spent[:3]
    ] == [(b.model, b.prompt_tokens, b.completion_tokens, False) for b in billed]
    assert [(s["cache_read_tokens"], s["cache_write_tokens"]) for s in spent[1:3]] == [
        (b.cache_read_tokens, b.cache_write_tokens) for b in billed[1:]
    ]
    assert (spent[3]["prompt_tokens"], spent[3]["estimated"]) == (cut_estimate, True)
    assert [s["model"] for s in samples] == ["m", "claude-m", "claude-m"]
    assert status["counters"]["openai"] == 1 and status["counters"]["anthropic"] == 3
    assert status["calibration"]["claude-m"]["samples"] == 2
    lines = [orjson.loads(line) for line in log_file.read_text().splitlines()]
    assert [(line["api"], line["ended"]) for line in lines] == [
        ("openai", "answered"),
        ("anthropic", "answered"),
        ("anthropic", "answered"),
        ("anthropic", "cut"),
    ]
    assert SECRET not in everything and SECRET not in log_file.read_text()


def test_anthropic_requests_go_to_their_own_upstream_with_their_auth_headers(
    fake: FakeUpstream,
) -> None:
    """`anthropic_upstream` takes Messages requests; OpenAI ones stay with `upstream`."""
    with serving(echo_app(), "echo") as echo:
        parts = urlsplit(echo)
        with governor_proxy(
            config(origin_of(fake), anthropic_upstream=f"http://gw:pw@{parts.netloc}")
        ) as (origin, governor):
            answer = web.post(
                f"{origin}/v1/messages?beta=true",
                json={"model": "claude-m", "max_tokens": 8, "messages": claude_turns(100)},
                headers={"x-api-key": SECRET, "anthropic-version": "2023-06-01"},
            )
            chat = client(origin).chat.completions.create(model="m", messages=messages(100))
            status = governor.status()
    echoed = answer.json()
    headers = {name.lower(): value for name, value in echoed["headers"]}
    assert (echoed["path"], echoed["query"]) == ("/v1/messages", "beta=true")
    assert (headers["x-api-key"], headers["anthropic-version"]) == (SECRET, "2023-06-01")
    assert headers["authorization"] == "Basic " + base64.b64encode(b"gw:pw").decode()
    assert "accept-encoding" not in headers, "a governed answer is asked for uncompressed"
    assert chat.choices[0].message.content == "All done: nothing needed attention."
    assert [d["api"] for d in status["decisions"]] == ["anthropic", "openai"]
    assert status["anthropic_upstream"] == echo and status["upstream"] == origin_of(fake)
    assert SECRET not in str(status)
