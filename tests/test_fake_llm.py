"""The fake upstream speaks the OpenAI API as a real client expects, and bills a ledger."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


def client(fake: FakeUpstream, key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=fake.url, api_key="x", max_retries=0, default_headers={"X-Tickwork-Tick": key}
    )


def test_non_streaming_answer_with_parallel_tool_calls_and_usage(fake: FakeUpstream) -> None:
    fake.script("ns", [Step(tool_calls=[ToolCallSpec(name="a"), ToolCallSpec(name="b")])])
    answer = client(fake, "ns").chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hello"}]
    )
    calls = answer.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["a", "b"]  # type: ignore[union-attr]
    assert answer.choices[0].finish_reason == "tool_calls"
    billed = [e for e in fake.ledger if e.key == "ns"]
    assert answer.usage is not None and billed[0].prompt_tokens == answer.usage.prompt_tokens


def test_streaming_sends_usage_only_when_asked(fake: FakeUpstream) -> None:
    fake.script("st", [Step(text="streamed text"), Step(text="again")])
    messages = [{"role": "user", "content": "hi"}]
    chunks = list(
        client(fake, "st").chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "streamed text"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    plain = list(
        client(fake, "st").chat.completions.create(model="m", messages=messages, stream=True)
    )
    assert all(c.usage is None for c in plain)
    assert [e.usage_reported for e in fake.ledger if e.key == "st"] == [True, False]


def test_scripted_errors_and_cut_streams(fake: FakeUpstream) -> None:
    fake.script("err", [Step(status=429), Step(text="x" * 100, cut_stream=True)])
    with pytest.raises(openai.RateLimitError):
        client(fake, "err").chat.completions.create(model="m", messages=[])
    stream = client(fake, "err").chat.completions.create(
        model="m", messages=[], stream=True, stream_options={"include_usage": True}
    )
    with pytest.raises(httpx.RemoteProtocolError):
        list(stream)
