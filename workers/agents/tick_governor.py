"""A tick's own governor: the proxy an agent CLI's model traffic goes through, on loopback.

The CLI is pointed at it (`ANTHROPIC_BASE_URL`, or its provider's `baseURL`) and never
holds the upstream's key: the proxy forwards each call to the tick's target with the real
key and the tick's header, so the upstream (and the fake one) tells ticks apart. It is
the governor proxy itself (`harness.governor.proxy`): the context-size guard applies as
it does to any client, with the tick's limits and calibrations. What makes it the tick's:

- every call is recorded as the tick's, at once: `ModelCallStarted` when it is sent,
  `BudgetSpent` and `ModelCalled` in one commit when its answer ended (before the CLI
  can send the next), a refusal as a `ModelCalled` with its error and no spend, each
  built by `workers.call_booking` with the stop reason and first token the relay saw;
- past the tool cap (after the batch that met it) or the level's daily budget, a call is
  answered by the governor with the stop text, as the hard ceiling is, and the CLI ends
  its turn with it: no upstream call, no spend;
- an upstream refusal (401, 429, 529, 5xx, unreachable) is the tick's failure: the CLI's
  own retries would wait minutes inside the tick, so it is stopped and the runner's
  retry policy decides, as for a Strands tick on a client without retries;
- `PreToolUse` hooks ask the tick's tool budget at `HOOK_PATH`;
- only the tick's CLI may use it: it is given a key of this tick's own (`client_key`, in
  place of the upstream's, which never reaches its environment), and a request without
  it is refused (401), so no other process on the host can spend through the real key.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx
import orjson
from starlette.types import Receive, Scope, Send

from harness.config import GovernorConfig, without_credentials
from harness.contracts import (
    TICK_HEADER,
    FailureClass,
    RouteCandidate,
    TickPayload,
    register_secret_value,
)
from harness.governor import (
    Alerts,
    BackgroundServer,
    Body,
    Calibrations,
    Dialect,
    Ending,
    Incoming,
    Judged,
    Proxy,
    ProxyGovernor,
    Upstream,
    Usage,
    UsageScanner,
    priced_apart,
    read_body,
    send_answer,
)
from workers.budget_guard import BudgetGuard
from workers.call_booking import CallBooking, CallFacts, Refusal
from workers.confinement import escapes
from workers.model import Target, provider_of
from workers.recorder import EventRecorder
from workers.tool_budget import ToolBudget

HOOK_PATH = "/_tickwork/pretool"
CLIENT_KEY_NAME = "TICKWORK_TICK_CLIENT_KEY"
"""The name the client key is redacted as (no variable holds it in the tick process)."""
TOKEN_HEADER = "x-tickwork-hook-token"
StopReason = Literal["tool_budget", "budget", "context_limit"]


@dataclass
class Failure:
    """Why the tick's upstream refused it: the first refusal decides the tick's failure."""

    failure_class: FailureClass
    message: str
    status: int | None


@dataclass
class _Call:
    number: int
    started: float
    judged: Judged
    booked: bool = False


@dataclass
class Ledger:
    """What the tick's calls cost, as the governor booked them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0
    estimated_calls: int = 0
    calls_started: int = 0
    cancelled_tools: set[str] = field(default_factory=set)
    """Tool use ids the hook refused."""
    tools_asked_at: dict[str, float] = field(default_factory=dict)
    """Tool use id -> when the hook asked."""
    tools_asked: dict[str, tuple[str, Any]] = field(default_factory=dict)
    """Tool use id -> the tool's name and input, as the hook asked about it."""


def upstream_base(target: Target) -> str:
    """What the proxy appends request paths to: an OpenAI base URL less its `/v1`.

    The SDKs take OpenAI's base with `/v1` (`https://api.openai.com/v1`) and Anthropic's
    without; the proxy gets the whole path (`/v1/chat/completions`, `/v1/messages`).
    """
    url = target.url.rstrip("/")
    if target.api.startswith("openai") and url.endswith("/v1"):
        return url[: -len("/v1")]
    return url


def failure_of(status: int | None, ended: Ending) -> Failure:
    """An upstream refusal, or an answer that never ended its turn, in the tick's classes.

    A turn ended at its output limit fails as a Strands tick's does (its SDK raises on a
    `max_tokens` stop, an error of no known class).
    """
    if status is not None and status < 400:
        if ended == "truncated":
            return Failure("internal", "the model's turn ended at its output limit", status)
        if ended in ("cut", "unfinished"):
            message = f"the upstream's answer ended before its end of turn ({ended})"
            return Failure("infrastructure", message, status)
    if status in (401, 403):
        return Failure("configuration", f"the upstream refused the API key ({status})", status)
    if status == 529:
        return Failure("infrastructure", "the upstream is overloaded (529)", status)
    if status == 429:
        return Failure("infrastructure", "the upstream rate-limited the tick (429)", status)
    if status is None:
        return Failure("infrastructure", f"the upstream did not answer ({ended})", None)
    if status < 300:
        return Failure("infrastructure", f"the answer broke off before its end ({ended})", status)
    if status >= 500:
        return Failure("infrastructure", f"the upstream failed ({status})", status)
    return Failure("content", f"the upstream refused the request ({status})", status)


class TickGovernor(ProxyGovernor):
    """The proxy's state for one tick: its limits, its counters, its events."""

    def __init__(
        self,
        payload: TickPayload,
        recorder: EventRecorder,
        target: Target,
        candidate: RouteCandidate | None,
        budget: ToolBudget,
        daily: BudgetGuard,
        on_failure: Callable[[], None],
    ) -> None:
        limits = payload.governor
        config = GovernorConfig(
            **limits.model_dump(),
            upstream=upstream_base(target),
            upstream_idle_seconds=min(payload.model_timeout_seconds, 3600),
        )
        calibrations = Calibrations(limits.chars_per_token, payload.calibrations, limits.calibrate)
        super().__init__(config, calibrations, None, Alerts(()))
        self.payload = payload
        self.recorder = recorder
        self.target = target
        self.candidate = candidate
        self.budget = budget
        self.daily = daily
        self.on_failure = on_failure
        self.ledger_of_tick = Ledger()
        self.booking = CallBooking.of(payload)
        self.provider = provider_of(httpx.URL(target.url))
        self.stopped: StopReason | None = None
        self.failure: Failure | None = None
        self._calls: dict[int, _Call] = {}
        self._lock = threading.Lock()

    def stopped_by_governor(self) -> bool:
        """The governor has answered a call in the model's place: the tick's turn ends."""
        return self.stopped is not None

    def judge(self, dialect: Dialect, body: Body, tick_id: str | None) -> Judged:
        """Measure the call; stop it at the tool cap or budget; else record that it is sent."""
        judged = super().judge(dialect, body, self.payload.tick_id)
        if self.budget.met:
            self.budget.exhausted = True
            self.stopped = "tool_budget"
            return replace(judged, reply=self.budget.stop_text())
        passed = self.daily.check()
        if passed is not None:
            self.stopped = "budget"
            return replace(judged, reply=passed)
        if judged.verdict.decision == "hard":
            self.stopped = "context_limit"
            return judged
        book = self.ledger_of_tick
        book.calls_started += 1
        self._calls[id(judged.entry)] = _Call(book.calls_started, time.monotonic(), judged)
        verdict = judged.verdict
        target = self.candidate.target if self.candidate else None
        self.recorder.record(
            self.booking.started(book.calls_started, verdict.model, verdict.est_tokens, target)
        )
        return judged

    def book(
        self,
        judged: Judged,
        prompt: int,
        completion: int,
        usage: Usage | None,
        answer: UsageScanner,
    ) -> None:
        """The call's `BudgetSpent` and `ModelCalled`, in one commit, as the tick's."""
        with self._lock:
            call = self._calls.get(id(judged.entry))
            if call is None or call.booked:
                return
            call.booked = True
        first = answer.first_token_at
        facts = self._facts(
            judged,
            call,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cache_read_tokens=usage.cached_tokens if usage else None,
            cache_write_tokens=usage.cache_write_tokens if usage else None,
            **priced_apart(usage),
            estimated=usage is None,
            stop_reason=answer.stop_reason,
            first_token_ms=None if first is None else round((first - call.started) * 1000, 3),
        )
        self._book(facts)

    def finish(self, judged: Judged, status: int | None, ended: Ending) -> None:
        """A call that ended without its spend booked, or whose turn never ended.

        A refusal (no answer began) costs nothing and is the tick's failure. An answer
        that began (a 2xx status) and ended before it was read whole, cut upstream or its
        CLI gone (killed, or stopped by the tick), may be billed: it is booked, estimated
        from its input, as a Strands tick books one. An answer read whole whose turn did
        not end (`unfinished`, `truncated`: the turn gate held its tool calls back) is
        booked as read, and fails the tick as well.
        """
        super().finish(judged, status, ended)
        with self._lock:
            call = self._calls.pop(id(judged.entry), None)
            booked = call is None or call.booked
            if call is not None:
                call.booked = True
        if call is None or (booked and ended in ("answered", "client_gone")):
            return
        failure = failure_of(status, ended)
        if not booked:
            began = status is not None and 200 <= status < 300
            error_class = f"Http{failure.status or 'Unanswered'}"
            facts = self._facts(
                judged,
                call,
                prompt_tokens=judged.verdict.est_tokens if began else 0,
                estimated=began,
                billed=began,
                refusal=Refusal(error_class, failure.failure_class, failure.message),
            )
            self._book(facts)
        if self.failure is None and ended != "client_gone":
            self.failure = failure
            self.on_failure()

    def book_calls_in_flight(self) -> None:
        """Book, estimated, each call still open when the governor stops or the tick ends.

        Its answer was cut by the stop, after the CLI ended (or was ended) without waiting
        for it; it reached the upstream, which may bill it. At the tick's end (SIGTERM) the
        relays still run: each call is booked by whichever of them and this claims it first.
        """
        with self._lock:
            open_calls = [call for call in self._calls.values() if not call.booked]
            for call in open_calls:
                call.booked = True
            self._calls.clear()
        for call in open_calls:
            why = Refusal(
                "GovernorStopped",
                "infrastructure",
                "the tick's governor stopped before the answer ended",
            )
            self._book(
                self._facts(
                    call.judged,
                    call,
                    prompt_tokens=call.judged.verdict.est_tokens,
                    estimated=True,
                    refusal=why,
                )
            )
        self._calls.clear()

    def _facts(self, judged: Judged, call: _Call, **seen: Any) -> CallFacts:
        """What every call of the tick shares (model, target, timing) and what was `seen`."""
        return CallFacts(
            model=judged.verdict.model,
            call=call.number,
            duration_ms=round((time.monotonic() - call.started) * 1000, 3),
            target=self.candidate.target if self.candidate else None,
            provider=self.provider,
            **seen,
        )

    def _book(self, facts: CallFacts) -> None:
        """Count the call in the tick's ledger and record its events in one commit."""
        if facts.billed:
            book = self.ledger_of_tick
            book.model_calls += 1
            book.estimated_calls += facts.estimated
            book.prompt_tokens += facts.prompt_tokens
            book.completion_tokens += facts.completion_tokens
        self.recorder.record_all(self.booking.ended(facts))

    def _record(self, tick_id: str | None, entry: Any) -> None:
        """The governor's decisions and calibration samples, as this tick's events."""
        event = entry() if callable(entry) else entry
        if getattr(event, "tick_id", "") is None:
            event = event.model_copy(update={"tick_id": self.payload.tick_id, "source": "worker"})
        self.recorder.record(event)

    def admit_tool(self, call: dict[str, Any]) -> str | None:
        """The `PreToolUse` hook's question: None when the call may run, else why not.

        The tool budget counts the call first, as a Strands tick's does; a call it admits
        that leaves the working folder of a tier below `full` is refused then, an error
        of the call (counted as run, as a Strands tool's refusal is), not a cancel.
        """
        refused = self.budget.admit()
        tool_use_id = str(call.get("tool_use_id") or "")
        self.ledger_of_tick.tools_asked_at[tool_use_id] = time.monotonic()
        self.ledger_of_tick.tools_asked[tool_use_id] = (
            str(call.get("tool_name") or "unknown"),
            call.get("tool_input"),
        )
        if refused is not None:
            self.ledger_of_tick.cancelled_tools.add(tool_use_id)
            return refused
        if self.payload.capabilities().shell:
            return None
        arguments = call.get("tool_input")
        return escapes(
            str(call.get("tool_name") or ""),
            arguments if isinstance(arguments, dict) else {},
            self.payload.work_folder(),
        )


class KeyedUpstream(Upstream):
    """The tick's target: each call gets the real key and the tick's header on its way."""

    def __init__(self, target: Target, tick_id: str, idle_seconds: float) -> None:
        base = upstream_base(target)
        super().__init__(base, without_credentials(base), idle_seconds)
        self.api = target.api
        self.key = target.api_key
        self.tick_id = tick_id

    async def forward(self, request: Incoming) -> Any:
        """Forward with the tick's credentials in place of the CLI's client key."""
        headers = request.headers
        for name in ("x-api-key", "authorization", TICK_HEADER):
            headers.popall(name, None)
        if self.key is not None:
            if self.api == "anthropic":
                headers["x-api-key"] = self.key
            else:
                headers["Authorization"] = f"Bearer {self.key}"
        headers[TICK_HEADER] = self.tick_id
        return await super().forward(request)


class TickProxy(Proxy):
    """The governor proxy of one tick, plus the tool-budget question of its hooks.

    It holds a streamed answer's tool calls until the turn has ended: no tool of a turn
    the upstream cut, or ended at its output limit, reaches the CLI (DESIGN invariant 15).
    """

    holds_tool_calls = True

    def __init__(self, governor: TickGovernor, token: str, client_key: str) -> None:
        super().__init__(governor)
        self.tick = governor
        self.token = token
        self.client_key = client_key
        upstream = KeyedUpstream(
            governor.target, governor.payload.tick_id, governor.config.upstream_idle_seconds
        )
        self.upstreams = {"openai": upstream, "anthropic": upstream}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The hook's question at `HOOK_PATH`; the CLI's calls as the proxy takes them."""
        if scope["type"] == "http" and scope["path"] == HOOK_PATH:
            await self.pretool(scope, receive, send)
            return
        if scope["type"] == "http" and not self._from_the_cli(scope):
            await send_answer(send, 401)
            return
        await super().__call__(scope, receive, send)

    def _from_the_cli(self, scope: Scope) -> bool:
        """The request carries the tick's client key (`x-api-key` or a bearer token)."""
        headers = dict(scope["headers"])
        given = headers.get(b"x-api-key", b"").decode("latin-1")
        bearer = headers.get(b"authorization", b"").decode("latin-1")
        if bearer.lower().startswith("bearer "):
            given = given or bearer[7:]
        return secrets.compare_digest(given, self.client_key)

    async def pretool(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Allow or deny one tool call; a caller without the tick's token is refused."""
        token = dict(scope["headers"]).get(TOKEN_HEADER.encode(), b"").decode("latin-1")
        body = await read_body(receive)
        if not secrets.compare_digest(token, self.token) or body is None:
            await send_answer(send, 403)
            return
        try:
            call = orjson.loads(body)
        except orjson.JSONDecodeError:
            call = {}
        refused = self.tick.admit_tool(call if isinstance(call, dict) else {})
        decision = {"decision": "allow", "reason": "within the tick's tool budget"}
        if refused is not None:
            decision = {"decision": "deny", "reason": refused}
        await send_answer(send, 200, decision)


class TickGovernorServer:
    """The tick's proxy on a loopback port, served from a thread of the tick process."""

    def __init__(self, governor: TickGovernor) -> None:
        self.governor = governor
        self.token = secrets.token_urlsafe(24)
        self.client_key = f"tickwork-{secrets.token_urlsafe(24)}"
        """The API key the CLI is given: good for this tick's governor only (and redacted)."""
        register_secret_value(CLIENT_KEY_NAME, self.client_key)
        proxy = TickProxy(governor, self.token, self.client_key)
        self._server = BackgroundServer(proxy, name="tick governor")
        self.origin = ""

    def start(self) -> str:
        """Serve; returns `http://127.0.0.1:<port>`."""
        self.origin = self._server.start()
        return self.origin

    @property
    def hook_url(self) -> str:
        """Where a `PreToolUse` hook asks."""
        return self.origin + HOOK_PATH

    def stop(self) -> None:
        """Stop serving (calls still in flight are cut after a second)."""
        self._server.stop()
