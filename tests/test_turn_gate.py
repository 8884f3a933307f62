"""The turn gate of a tick's governor: a tool call reaches the CLI only from a turn that ended.

Fed the fake upstream's real streams (taken over a socket), split at every size: what
the gate passes is the whole stream of a finished turn, and of any other no tool call.
"""

from __future__ import annotations

import pytest

from harness.contracts import TICK_HEADER
from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from harness.governor.proxy.dialects import ANTHROPIC_MESSAGES, OPENAI_CHAT, Dialect
from harness.governor.proxy.turns import TurnGate
from tests import web

CALL = ToolCallSpec(name="Bash", arguments={"command": "touch /tmp/never"})
ASKS = {
    "anthropic": ("/v1/messages", {"max_tokens": 100}),
    "openai": ("/v1/chat/completions", {"stream_options": {"include_usage": True}}),
}
DIALECTS = {"anthropic": ANTHROPIC_MESSAGES, "openai": OPENAI_CHAT}
TOOL_MARKERS = {"anthropic": b'"tool_use"', "openai": b'"tool_calls"'}


def streamed(fake: FakeUpstream, api: str, step: Step, key: str) -> bytes:
    """The bytes the fake streams for one scripted answer."""
    fake.script(key, [step])
    path, extra = ASKS[api]
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    answer = web.post(fake.origin + path, json=body | extra, headers={TICK_HEADER: key})
    return answer.content


def gated(dialect: Dialect, stream: bytes, size: int) -> tuple[bytes, TurnGate]:
    """What the gate lets through of `stream` fed in pieces of `size` bytes."""
    gate = TurnGate(dialect)
    passed = b"".join(gate.feed(stream[at : at + size]) for at in range(0, len(stream), size))
    return passed + gate.finish(), gate


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("size", [1, 7, 1 << 20])
def test_a_finished_turn_passes_whole_and_an_unfinished_ones_tool_calls_never(
    fake: FakeUpstream, api: str, size: int
) -> None:
    dialect, marker = DIALECTS[api], TOOL_MARKERS[api]
    key = f"gate-{api}-{size}"
    finished = streamed(fake, api, Step(text="Looking.", tool_calls=[CALL]), key)
    passed, gate = gated(dialect, finished, size)
    assert passed == finished and gate.state == "ended"
    for fault, state in (({"unfinished": True}, "open"), ({"max_tokens": True}, "truncated")):
        stream = streamed(fake, api, Step(text="Looking.", tool_calls=[CALL], **fault), key)
        assert marker in stream
        passed, gate = gated(dialect, stream, size)
        assert gate.state == state
        assert marker not in passed, f"a tool call of a turn that is {state}"
        assert b"Looking." in passed, "the text before the tool call streams as it comes"


def test_a_text_only_turn_streams_through_as_it_comes(fake: FakeUpstream) -> None:
    stream = streamed(fake, "anthropic", Step(text="The pager is quiet.", unfinished=True), "t")
    gate = TurnGate(ANTHROPIC_MESSAGES)
    assert gate.feed(stream) == stream and not gate.holding and gate.state == "open"
