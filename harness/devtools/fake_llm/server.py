"""The fake's app (every wire format plus `/_script` and `/_ledger`) and its socket.

`/_script` is the operator's handle on the answers: POST appends steps to a key's queue,
GET lists what is queued per key, DELETE (`?key=K`, or every key) drops it, so a script
left over from an earlier try can be seen and cleared instead of answering the next tick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI

from harness.contracts import Api
from harness.devtools.fake_llm import anthropic, ollama, openai_chat, openai_responses
from harness.devtools.fake_llm.script import LedgerEntry, Script, Step
from harness.devtools.fake_llm.state import FakeState, KvCache, Tokenizer
from harness.devtools.serving import BackgroundServer


def create_app(state: FakeState | None = None) -> FastAPI:
    """The fake upstream, with `/_script` and `/_ledger` for tests to drive it."""
    app = FastAPI(title="tickwork fake upstream")
    app.state.fake = state or FakeState()
    for module in (openai_chat, openai_responses, anthropic, ollama):
        app.include_router(module.router)

    @app.post("/_script")
    async def add_script(script: Script) -> dict[str, int]:
        """Append the steps to those the key holds: `waiting` counts them all."""
        waiting = app.state.fake.script(script.key, script.steps)
        return {"queued": len(script.steps), "waiting": waiting}

    @app.get("/_script")
    async def list_scripts() -> dict[str, list[dict[str, Any]]]:
        """The steps still queued per key, each with the fields it sets."""
        queued = app.state.fake.queued()
        return {
            key: [step.model_dump(exclude_defaults=True) for step in steps]
            for key, steps in queued.items()
        }

    @app.delete("/_script")
    async def clear_scripts(key: str | None = None) -> dict[str, int]:
        """Drop the key's queued steps, or every key's without one."""
        return {"cleared": app.state.fake.clear(key)}

    @app.get("/_ledger")
    async def ledger() -> list[LedgerEntry]:
        return list(app.state.fake.ledger)

    return app


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
        self.origin = ""
        """`http://host:port` once started."""
        self.url = ""
        """The OpenAI base URL (`…/v1`) once started."""

    def start(self) -> FakeUpstream:
        """Serve on a real socket; returns self so a test can start it in one expression."""
        self.origin = self._server.start()
        self.url = self.origin + "/v1"
        return self

    def base_url(self, api: Api) -> str:
        """What each protocol's own SDK takes as its base: `/v1` for OpenAI, the origin else."""
        return self.url if api.startswith("openai") else self.origin

    def stop(self) -> None:
        """Stop serving and join the server's thread."""
        self._server.stop()

    def script(self, key: str, steps: list[Step]) -> None:
        """Queue steps for the requests that carry `key`, without an HTTP round trip."""
        self.state.script(key, steps)

    def when_asked(self, key: str, action: Callable[[], None]) -> None:
        """Run `action` once the next request of `key` has arrived, before it is answered."""
        self.state.when_asked(key, action)

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
