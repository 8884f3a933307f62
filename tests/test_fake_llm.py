"""The fake upstream speaks each wire format as its real client expects, and bills a ledger."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import ollama
import openai
import pytest

from harness.contracts.wire import Api
from harness.devtools.fake_llm import DEFAULT_TEXT, FakeUpstream, Step, ToolCallSpec
from tests import web


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


# Anthropic Messages, OpenAI Responses and Ollama, through each protocol's own SDK.


def anthropic_client(fake: FakeUpstream, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=fake.base_url("anthropic"),
        api_key="x",
        max_retries=0,
        default_headers={"X-Tickwork-Tick": key},
    )


def ollama_client(fake: FakeUpstream, key: str) -> ollama.Client:
    return ollama.Client(fake.base_url("ollama"), headers={"X-Tickwork-Tick": key})


TOOL = {"name": "lookup", "description": "d", "input_schema": {"type": "object"}}


def test_anthropic_stream_has_thinking_text_and_tool_use_with_cache_usage(
    fake: FakeUpstream,
) -> None:
    call = ToolCallSpec(name="lookup", arguments={"q": "disk usage", "k": 3})
    step = Step(thinking="Let me think.", text="Checking.", tool_calls=[call], cache_read_tokens=5)
    fake.script("an", [step])
    request = {
        "model": "claude-x",
        "max_tokens": 100,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hello there, how is the disk?"}],
        "tools": [TOOL],
    }
    with anthropic_client(fake, "an").messages.stream(**request) as stream:  # type: ignore[arg-type]
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "input_json" in kinds and "thinking" in kinds
    blocks = {block.type: block for block in final.content}
    assert blocks["thinking"].thinking == "Let me think."  # type: ignore[union-attr]
    assert blocks["text"].text == "Checking."  # type: ignore[union-attr]
    assert blocks["tool_use"].input == call.arguments  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use"
    [billed] = [e for e in fake.ledger if e.key == "an"]
    assert billed.api == "anthropic" and billed.cache_read_tokens == 5
    assert final.usage.cache_read_input_tokens == 5
    assert final.usage.input_tokens + 5 == billed.prompt_tokens
    assert final.usage.output_tokens == billed.completion_tokens > billed.reasoning_tokens > 0


def test_anthropic_unstreamed_message_and_errors_in_anthropic_shape(fake: FakeUpstream) -> None:
    fake.script("an2", [Step(text="plain"), Step(status=529), Step(status=429)])
    client = anthropic_client(fake, "an2")
    request = {
        "model": "claude-x",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}],
    }
    message = client.messages.create(**request)  # type: ignore[call-overload]
    assert message.content[0].text == "plain" and message.stop_reason == "end_turn"
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        client.messages.create(**request)  # type: ignore[call-overload]
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    with pytest.raises(anthropic.RateLimitError):
        client.messages.create(**request)  # type: ignore[call-overload]
    counted = client.messages.count_tokens(model="claude-x", messages=request["messages"])
    assert counted.input_tokens == fake.ledger[-1].prompt_tokens


def test_responses_stream_has_reasoning_text_calls_and_usage(fake: FakeUpstream) -> None:
    fake.script("rs", [Step(thinking="hmm", text="Hi.", tool_calls=[ToolCallSpec(name="a")])])
    stream = client(fake, "rs").responses.create(
        model="gpt-x", input="hello", instructions="be brief", stream=True
    )
    events = list(stream)
    kinds = [event.type for event in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert "response.reasoning_summary_text.delta" in kinds
    assert "response.function_call_arguments.done" in kinds
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")  # type: ignore[union-attr]
    assert text == "Hi."
    usage = events[-1].response.usage  # type: ignore[union-attr]
    [billed] = [e for e in fake.ledger if e.key == "rs"]
    assert (usage.input_tokens, usage.output_tokens) == (
        billed.prompt_tokens,
        billed.completion_tokens,
    )
    assert usage.output_tokens_details.reasoning_tokens == billed.reasoning_tokens > 0
    plain = client(fake, "rs").responses.create(model="gpt-x", input="again")
    assert plain.output_text == DEFAULT_TEXT and plain.usage is not None


def test_ollama_streams_ndjson_with_eval_counts_and_whole_tool_calls(fake: FakeUpstream) -> None:
    call = ToolCallSpec(name="lookup", arguments={"q": "x"})
    fake.script("ol", [Step(text="Looking it up.", tool_calls=[call]), Step(status=500)])
    parts = list(
        ollama_client(fake, "ol").chat(
            model="llama", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert "".join(p.message.content or "" for p in parts) == "Looking it up."
    calls = [c for p in parts for c in p.message.tool_calls or []]
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("lookup", {"q": "x"})
    ]
    [billed] = [e for e in fake.ledger if e.key == "ol"]
    assert parts[-1].done and parts[-1].prompt_eval_count == billed.prompt_tokens
    assert parts[-1].eval_count == billed.completion_tokens and billed.api == "ollama"
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client(fake, "ol").chat(model="llama", messages=[])
    assert refused.value.status_code == 500


@pytest.mark.parametrize("api", ["anthropic", "openai-responses", "ollama"])
def test_cut_streams_drop_the_connection_before_the_usage(fake: FakeUpstream, api: Api) -> None:
    key = f"cut-{api}"
    fake.script(key, [Step(text="x" * 100, cut_stream=True)])
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises((httpx.RemoteProtocolError, anthropic.APIConnectionError)):
        if api == "anthropic":
            request = {"model": "c", "max_tokens": 10, "messages": messages}
            with anthropic_client(fake, key).messages.stream(**request) as stream:  # type: ignore[arg-type]
                list(stream)
        elif api == "ollama":
            list(ollama_client(fake, key).chat(model="l", messages=messages, stream=True))
        else:
            list(client(fake, key).responses.create(model="g", input="hi", stream=True))
    [billed] = [e for e in fake.ledger if e.key == key]
    assert billed.api == api and not billed.usage_reported


def test_the_script_is_listed_per_key_appended_to_and_cleared_by_key_or_whole() -> None:
    server = FakeUpstream().start()
    try:
        with web.Client(base_url=server.origin, timeout=10) as http:
            slow = {"key": "default", "steps": [{"text": "Slow answer.", "delay": 20}]}
            assert http.post("/_script", json=slow).json() == {"queued": 1, "waiting": 1}
            again = {"key": "default", "steps": [{"status": 500}]}
            assert http.post("/_script", json=again).json() == {"queued": 1, "waiting": 2}
            mine = {"key": "min-1", "steps": [{"text": "Mine."}]}
            http.post("/_script", json=mine)
            assert http.get("/_script").json() == {
                "default": [{"text": "Slow answer.", "delay": 20.0}, {"status": 500}],
                "min-1": [{"text": "Mine."}],
            }
            client(server, "min-1").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert "min-1" not in http.get("/_script").json(), "an answered step leaves"
            http.post("/_script", json=mine)
            assert http.delete("/_script", params={"key": "default"}).json() == {"cleared": 2}
            assert http.get("/_script").json() == {"min-1": [{"text": "Mine."}]}
            assert http.delete("/_script").json() == {"cleared": 1}
            assert http.get("/_script").json() == {}
            answer = client(server, "min-1").chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert answer.choices[0].message.content == DEFAULT_TEXT, "nothing scripted is left"
    finally:
        server.stop()
