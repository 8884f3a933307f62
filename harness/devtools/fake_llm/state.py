"""The fake's memory: scripts, the ledger, barriers and the KV-cache emulation."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any, Literal

import orjson

from harness.devtools.fake_llm.script import LedgerEntry, Step
from harness.devtools.fake_llm.tokens import (
    count_tokens,
    count_word_tokens,
    render_prompt,
    shared_prefix,
)

Tokenizer = Literal["chars", "words"]
KvCache = Literal["none", "hidden", "llama"]


class FakeState:
    """Scripts, the ledger and request times; shared by the app and in-process tests.

    Two options make it behave like real servers for the governor's calibration:
    `tokenizer="words"` counts prompt tokens the way a subword tokenizer roughly does, over
    the prompt as a chat template renders it (not the JSON), and `kv_cache` reports, like
    llama.cpp or Ollama reusing their KV cache, only the prompt tokens past the prefix the
    previous request shared (`"llama"` says so in `timings`, `"hidden"` does not).
    """

    def __init__(self, tokenizer: Tokenizer = "chars", kv_cache: KvCache = "none") -> None:
        self.lock = threading.Lock()
        self.scripts: dict[str, deque[Step]] = defaultdict(deque)
        self.ledger: list[LedgerEntry] = []
        self.first_request: dict[str, float] = {}
        self.tokenizer = tokenizer
        self.kv_cache = kv_cache
        self.previous_prompt: dict[str, str] = {}
        self.received: deque[dict[str, Any]] = deque(maxlen=100)
        """The latest request bodies of every wire format, as they arrived."""
        self.arrived: dict[str, int] = defaultdict(int)
        """Requests per key that reached a `together` barrier."""
        self.on_answered: dict[str, deque[Callable[[], None]]] = defaultdict(deque)
        """Actions to run, one per streamed answer of the key, once its last byte is sent."""
        self.on_asked: dict[str, deque[Callable[[], None]]] = defaultdict(deque)
        """Actions to run, one per request of the key, once it has arrived, before its answer."""

    def prompt_tokens(self, key: str, view: dict[str, Any]) -> tuple[int, int]:
        """(tokens billed, tokens reused from the KV cache) for a request's chat-shaped view."""
        if self.tokenizer == "chars":
            total = count_tokens(orjson.dumps([view.get("messages"), view.get("tools")]).decode())
            return total, 0
        prompt = render_prompt(view)
        total = count_word_tokens(prompt)
        if self.kv_cache == "none":
            return total, 0
        with self.lock:
            previous = self.previous_prompt.get(key, "")
            self.previous_prompt[key] = prompt
        shared = shared_prefix(previous, prompt)
        cached = count_word_tokens(prompt[:shared]) if shared else 0
        return max(1, total - cached), cached

    async def gather(self, key: str, count: int) -> None:
        """Wait until `count` requests of `key` have reached this barrier (`Step.together`)."""
        with self.lock:
            self.arrived[key] += 1
        while self.arrived[key] < count:
            await asyncio.sleep(0.01)

    def script(self, key: str, steps: list[Step]) -> int:
        """Queue steps after those the key holds already; returns how many it holds now."""
        with self.lock:
            self.scripts[key].extend(steps)
            return len(self.scripts[key])

    def queued(self) -> dict[str, list[Step]]:
        """The steps still queued, per key that holds any, in the order they will answer."""
        with self.lock:
            return {key: list(steps) for key, steps in self.scripts.items() if steps}

    def clear(self, key: str | None = None) -> int:
        """Drop the steps queued for `key` (None: every key's); returns how many were dropped."""
        with self.lock:
            keys = list(self.scripts) if key is None else [key]
            dropped = sum(len(self.scripts.pop(each, ())) for each in keys)
        return dropped

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

    def when_asked(self, key: str, action: Callable[[], None]) -> None:
        """Run `action` in the server's thread once the next request of `key` has arrived.

        Its client has sent the whole request and waits; nothing of the answer is sent
        before the action returns (a test can so stop the client before its answer).
        """
        with self.lock:
            self.on_asked[key].append(action)

    def answered(self, key: str) -> None:
        """The streamed answer of `key` is sent: run the action waiting for it, if any."""
        self._run_next(self.on_answered, key)

    def asked(self, key: str) -> None:
        """A request of `key` has arrived: run the action waiting for it, if any."""
        self._run_next(self.on_asked, key)

    def _run_next(self, actions: dict[str, deque[Callable[[], None]]], key: str) -> None:
        with self.lock:
            waiting = actions.get(key)
            action = waiting.popleft() if waiting else None
        if action is not None:
            action()

    def bill(self, entry: LedgerEntry) -> None:
        """Remember what a request billed."""
        with self.lock:
            self.ledger.append(entry)
