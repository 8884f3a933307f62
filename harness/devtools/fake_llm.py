"""An OpenAI-compatible chat-completions server of tickwork's own, for tests and demos.

Requests are answered from scripts, one queue per tick (the worker sends its tick id in
`X-Tickwork-Tick`), so parallel ticks can each get their own conversation: text answers,
tool-call rounds (parallel calls included), HTTP errors, delays, streams cut before the
usage chunk and streams that end cleanly before the turn's end. Every answer is written
to a ledger with the tokens it billed, so a test can hold the store's spend against what
the upstream charged. Token counts follow a fixed rule (a token per 4 characters of the
request or answer), so they are reproducible.

Two options make it behave like real servers for the governor's calibration: `tokenizer=
"words"` counts prompt tokens the way a subword tokenizer roughly does, over the prompt as
a chat template renders it (not the JSON), and `kv_cache` reports, like llama.cpp or
Ollama reusing their KV cache, only the prompt tokens past the prefix the previous
request shared (`"llama"` says so in `timings`, `"hidden"` does not).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from harness.contracts.payload import TICK_HEADER
from harness.devtools.serving import BackgroundServer

DEFAULT_TEXT = "All done: nothing needed attention."


class ToolCallSpec(BaseModel):
    """A tool call a scripted step makes the model ask for."""

    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Step(BaseModel):
    """One scripted answer. With neither text nor tool calls, the default text is sent."""

    model_config = ConfigDict(extra="forbid")
    text: str | None = None
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    status: int | None = None
    """Answer with this HTTP error status instead (429, 500, ...)."""
    error_message: str = "scripted status {status}"
    """The error's message; `{key}` and `{authorization}` quote the request's credentials,
    as careless gateways do (`Incorrect API key provided: {key}`)."""
    delay: float = 0.0
    """Seconds to wait before answering."""
    cut_stream: bool = False
    """Streaming only: send the content, then drop the connection before usage and [DONE]."""
    omit_usage: bool = False
    chunk_delay: float = 0.0
    """Streaming only: seconds between two chunks."""
    unfinished: bool = False
    """Streaming only: send the content, then end the body cleanly with no finish reason,
    usage or [DONE], as a gateway that closes the connection at its own timeout: nothing
    below the model's stream sees an error, only the turn's missing end tells."""
    cut_after_chunks: int | None = None
    """Streaming only: drop the connection after this many chunks (a tool call's arguments
    come in two chunks, so a cut can leave one half-sent)."""
    raw_body: str | None = None
    """Answer 200 with exactly this body instead (an HTML error page, broken JSON)."""
    raw_content_type: str = "application/json"
    usage: dict[str, Any] | None = None
    """Report this usage instead of the counted one (a string, a negative number …)."""
    headers: dict[str, str] = Field(default_factory=dict)
    together: int = 0
    """Answer only once this many requests of the same key have arrived: a barrier that
    shows requests were in flight at once without timing them."""
    """Extra headers of the answer (`x-ratelimit-remaining-requests`, `retry-after` …)."""


class Script(BaseModel):
    """The steps a test queues for requests carrying `key` (its tick header, or `default`)."""

    model_config = ConfigDict(extra="forbid")
    key: str = "default"
    steps: list[Step]


class LedgerEntry(BaseModel):
    """What one answered request billed, so a test can compare it with the recorded spend."""

    key: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    usage_reported: bool
    stream: bool
    received_at: float
    prompt_tokens_total: int = 0
    """Cached prefix included: what a server without a KV cache would report."""


Tokenizer = Literal["chars", "words"]
KvCache = Literal["none", "hidden", "llama"]

_PIECES = re.compile(r"[A-Za-z]+|[0-9]+|\s+|[^\sA-Za-z0-9]")


def count_tokens(text: str) -> int:
    """A crude token count (4 characters each), enough to make spend add up in tests."""
    return max(1, math.ceil(len(text) / 4))


def count_word_tokens(text: str) -> int:
    """Like a subword tokenizer: a word per 6 letters, numbers by 3 digits, each symbol one."""
    total = 0
    for match in _PIECES.finditer(text):
        piece = match.group()
        if piece[0].isalpha():
            total += math.ceil(len(piece) / 6)
        elif piece[0].isdigit():
            total += math.ceil(len(piece) / 3)
        elif not piece.isspace() or "\n" in piece:
            total += 1
    return max(1, total)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _shared_prefix(first: str, second: str) -> int:
    """Length of the common start, compared in blocks (prompts run to megabytes)."""
    end, size = min(len(first), len(second)), 0
    while size + 4096 <= end and first[size : size + 4096] == second[size : size + 4096]:
        size += 4096
    while size < end and first[size] == second[size]:
        size += 1
    return size


def render_prompt(body: dict[str, Any]) -> str:
    """The prompt as a chat template lays it out: what a real server tokenizes."""
    parts = []
    for tool in body.get("tools") or []:
        parts.append("<|tool|>" + orjson.dumps(tool.get("function", tool)).decode() + "\n")
    for message in body.get("messages") or []:
        parts.append(f"<|{message.get('role')}|>\n{_text(message.get('content'))}")
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(f"<tool_call>{function.get('name')}({function.get('arguments')})")
        parts.append("<|end|>\n")
    return "".join(parts)


class FakeState:
    """Scripts, the ledger and request times; shared by the app and in-process tests."""

    def __init__(self, tokenizer: Tokenizer = "chars", kv_cache: KvCache = "none") -> None:
        self.lock = threading.Lock()
        self.scripts: dict[str, deque[Step]] = defaultdict(deque)
        self.ledger: list[LedgerEntry] = []
        self.first_request: dict[str, float] = {}
        self.tokenizer = tokenizer
        self.kv_cache = kv_cache
        self.previous_prompt: dict[str, str] = {}
        self.received: deque[dict[str, Any]] = deque(maxlen=100)
        """The latest chat request bodies, as they arrived."""
        self.arrived: dict[str, int] = defaultdict(int)
        """Requests per key that reached a `together` barrier."""
        self.on_answered: dict[str, deque[Callable[[], None]]] = defaultdict(deque)
        """Actions to run, one per streamed answer of the key, once its last byte is sent."""

    def prompt_tokens(self, key: str, body: dict[str, Any]) -> tuple[int, int]:
        """(tokens billed, tokens reused from the KV cache) for a request."""
        if self.tokenizer == "chars":
            total = count_tokens(orjson.dumps([body.get("messages"), body.get("tools")]).decode())
            return total, 0
        prompt = render_prompt(body)
        total = count_word_tokens(prompt)
        if self.kv_cache == "none":
            return total, 0
        with self.lock:
            previous = self.previous_prompt.get(key, "")
            self.previous_prompt[key] = prompt
        shared = _shared_prefix(previous, prompt)
        cached = count_word_tokens(prompt[:shared]) if shared else 0
        return max(1, total - cached), cached

    async def gather(self, key: str, count: int) -> None:
        """Wait until `count` requests of `key` have reached this barrier (`Step.together`)."""
        with self.lock:
            self.arrived[key] += 1
        while self.arrived[key] < count:
            await asyncio.sleep(0.01)

    def script(self, key: str, steps: list[Step]) -> None:
        """Queue steps for the requests that carry `key`."""
        with self.lock:
            self.scripts[key].extend(steps)

    def next_step(self, key: str) -> Step:
        """The next scripted answer for `key`, the default script's, or a plain text answer."""
        with self.lock:
            self.first_request.setdefault(key, time.time())
            queue = self.scripts.get(key) or self.scripts.get("default")
            return queue.popleft() if queue else Step()

    def when_answered(self, key: str, action: Callable[[], None]) -> None:
        """Run `action` in the server's thread once the next streamed answer of `key` is sent.

        A test can so act (kill the worker) at the exact moment the upstream has answered
        in full, before the client has done anything with the answer.
        """
        with self.lock:
            self.on_answered[key].append(action)

    def answered(self, key: str) -> None:
        """The streamed answer of `key` is sent: run the action waiting for it, if any."""
        with self.lock:
            waiting = self.on_answered.get(key)
            action = waiting.popleft() if waiting else None
        if action is not None:
            action()

    def bill(self, entry: LedgerEntry) -> None:
        """Remember what a request billed."""
        with self.lock:
            self.ledger.append(entry)


def _answer(step: Step) -> tuple[str, list[dict[str, Any]]]:
    calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:12]}",
            "type": "function",
            "function": {"name": call.name, "arguments": orjson.dumps(call.arguments).decode()},
        }
        for call in step.tool_calls
    ]
    text = step.text if step.text is not None else ("" if calls else DEFAULT_TEXT)
    return text, calls


def create_app(state: FakeState | None = None) -> FastAPI:
    """The fake OpenAI-compatible server, with `/_script` and `/_ledger` for tests to drive it."""
    app = FastAPI(title="tickwork fake upstream")
    app.state.fake = state or FakeState()

    @app.post("/_script")
    async def add_script(script: Script) -> dict[str, int]:
        app.state.fake.script(script.key, script.steps)
        return {"queued": len(script.steps)}

    @app.get("/_ledger")
    async def ledger() -> list[LedgerEntry]:
        return list(app.state.fake.ledger)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        fake: FakeState = app.state.fake
        body = await request.json()
        fake.received.append(body)
        key = request.headers.get(TICK_HEADER, "default")
        step = fake.next_step(key)
        if step.together:
            await fake.gather(key, step.together)
        if step.delay:
            await asyncio.sleep(step.delay)
        if step.status:
            authorization = request.headers.get("authorization", "")
            error = step.error_message.format(
                status=step.status,
                authorization=authorization,
                key=authorization.removeprefix("Bearer "),
            )
            return JSONResponse(
                {"error": {"message": error, "type": "fake"}},
                status_code=step.status,
                headers=step.headers,
            )
        if step.raw_body is not None:
            return Response(step.raw_body, media_type=step.raw_content_type)
        text, calls = _answer(step)
        model = str(body.get("model", "fake-model"))
        prompt_tokens, cached = fake.prompt_tokens(key, body)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": count_tokens(text + orjson.dumps(calls).decode()),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        billed = usage
        if step.usage is not None:
            usage = step.usage
        stream = bool(body.get("stream"))
        include_usage = not stream or bool((body.get("stream_options") or {}).get("include_usage"))
        reported = include_usage and not (step.omit_usage or step.cut_stream or step.unfinished)
        fake.bill(
            LedgerEntry(
                key=key,
                model=model,
                prompt_tokens=billed["prompt_tokens"],
                completion_tokens=billed["completion_tokens"],
                usage_reported=reported,
                stream=stream,
                received_at=time.time(),
                prompt_tokens_total=prompt_tokens + cached,
            )
        )
        extra = {"timings": {"prompt_n": prompt_tokens, "cache_n": cached}}
        if fake.kv_cache != "llama":
            extra = {}
        finish = "tool_calls" if calls else "stop"
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = calls
            completion: dict[str, Any] = {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            }
            if reported:
                completion.update(usage=usage, **extra)
            return JSONResponse(completion, headers=step.headers)
        return StreamingResponse(
            _stream(
                model, text, calls, finish, usage if reported else None, step, extra, key, fake
            ),
            media_type="text/event-stream",
            headers=step.headers,
        )

    return app


async def _stream(
    model: str,
    text: str,
    calls: list[dict[str, Any]],
    finish: str,
    usage: dict[str, Any] | None,
    step: Step,
    extra: dict[str, Any],
    key: str,
    fake: FakeState,
) -> AsyncIterator[bytes]:
    ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        body = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": text[start : start + 16]} for start in range(0, len(text), 16)]
    for index, call in enumerate(calls):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        opening = {**call, "function": {**call["function"], "arguments": arguments[:half]}}
        deltas.append({"tool_calls": [{"index": index, **opening}]})
        deltas.append(
            {"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}
        )
    for sent, delta in enumerate(deltas):
        if sent == step.cut_after_chunks:
            raise ConnectionAbortedError("scripted cut in the middle of the answer")
        if sent:
            await asyncio.sleep(step.chunk_delay)
        yield chunk(delta)
    if step.cut_stream:
        await asyncio.sleep(0.05)
        raise ConnectionAbortedError("scripted cut before the usage chunk")
    if step.unfinished:
        fake.answered(key)
        return
    yield chunk({}, finish)
    if usage is not None:
        body = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [],
            "usage": usage,
            **extra,
        }
        yield b"data: " + orjson.dumps(body) + b"\n\n"
    yield b"data: [DONE]\n\n"
    fake.answered(key)


class FakeUpstream:
    """The fake server on a real socket, in a background thread of this process."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        tokenizer: Tokenizer = "chars",
        kv_cache: KvCache = "none",
    ) -> None:
        self.state = FakeState(tokenizer, kv_cache)
        self._server = BackgroundServer(create_app(self.state), host, port, "fake upstream")
        self.url = ""

    def start(self) -> FakeUpstream:
        """Serve on a real socket; returns self so a test can start it in one expression."""
        self.url = self._server.start() + "/v1"
        return self

    def stop(self) -> None:
        """Stop serving and join the server's thread."""
        self._server.stop()

    def script(self, key: str, steps: list[Step]) -> None:
        """Queue steps for the requests that carry `key`, without an HTTP round trip."""
        self.state.script(key, steps)

    def when_answered(self, key: str, action: Callable[[], None]) -> None:
        """Run `action` once the next streamed answer of `key` is sent in full."""
        self.state.when_answered(key, action)

    @property
    def ledger(self) -> list[LedgerEntry]:
        """A copy of what was billed so far, safe to read while requests arrive."""
        with self.state.lock:
            return list(self.state.ledger)


@contextmanager
def fake_upstream(port: int = 0) -> Iterator[FakeUpstream]:
    """A fake upstream for the length of a `with` block."""
    server = FakeUpstream(port=port).start()
    try:
        yield server
    finally:
        server.stop()
