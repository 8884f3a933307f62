"""tickwork's events: typed, versioned pydantic models, and their mapping to store records.

Every event carries a `type` and schema `version` (class variables, stored in their own
columns), an `event_id` that makes appends idempotent, and `occurred_at`, the moment it
happened (a spooled event is recorded later than it occurred; reports use this one).
Events read back with a type or version this code does not know become `RawEvent`s, kept
whole: a newer writer's events are never dropped by an older reader.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any, ClassVar, Literal
from uuid import UUID, uuid5

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveInt

from harness.contracts.failures import FailureClass
from harness.contracts.ids import new_event_id
from harness.contracts.pricing import Billing, CallPrice, UsageParts, billed
from harness.contracts.records import NewEvent, StoredEvent
from harness.contracts.secrets import redact, redact_data


def utcnow() -> datetime:
    """The aware UTC now every event is stamped with, so stored times compare across hosts."""
    return datetime.now(UTC)


class Event(BaseModel):
    """Base of every event; subclasses set `type` and add their body fields.

    Each event's validator is built on its first use (`defer_build`), not at import: a
    command or a cold tick worker uses a handful of the forty-odd types, and building them
    all cost every start-up about 0.03 s.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    type: ClassVar[str]
    version: ClassVar[int] = 1

    event_id: UUID = Field(default_factory=new_event_id)
    occurred_at: datetime = Field(default_factory=utcnow)

    def to_record(self, metadata: dict[str, Any] | None = None) -> NewEvent:
        """The store's record of the event; the id travels apart so a retried append is a no-op."""
        data = redact_data(self.model_dump(mode="json", exclude={"event_id"}))
        return NewEvent(self.event_id, self.type, self.version, data, metadata or {})


class RawEvent(BaseModel):
    """An event of a type (or version) this code does not know, kept as stored."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    type: str
    version: int
    event_id: UUID
    data: dict[str, Any]


def tick_stream(tick_id: str) -> str:
    """One tick's stream: appended by expected version, so one writer wins."""
    return f"tick-{tick_id}"


def level_stream(level: str) -> str:
    """The stream of one level's pauses and resumes, read to decide whether a level may run."""
    return f"level-{level}"


class TickEvent(Event):
    """Events of one tick; they live in the stream `tick-<tick_id>`."""

    tick_id: str
    level: str

    @property
    def stream_id(self) -> str:
        """The stream the event belongs to, derived from the tick so callers cannot mix it up."""
        return tick_stream(self.tick_id)


class TickScheduled(TickEvent):
    """The claim of a tick; with a routing catalog, also the decision that chose its model."""

    type = "TickScheduled"
    slot: datetime | None = None
    fire_at: datetime | None = None
    """When the slot fired, if later than `slot`: the level's jitter delays it. Fire lag
    is measured from it."""
    model: str | None = None
    attempt: NonNegativeInt = 1
    reserved_tokens: NonNegativeInt = 0
    """Held against the level's daily budget while the tick is in flight."""
    route_id: str | None = None
    rule_id: str | None = None
    policy_priority: NonNegativeInt | None = None
    reason_codes: list[str] | None = None
    window: str | None = None
    candidates: list[str] | None = None
    catalog_revision: str | None = None
    config_revision: str | None = None
    """The revision of the levels' settings the tick was claimed under (`ConfigReloaded`);
    the settings themselves are stored once in `LevelsRecorded`."""
    manual: bool = False
    """Started by a person (`tickwork tick`), in the manual lane, not by a slot."""
    forced: bool = False
    """A manual tick told to run through its level's pause and budget (`--force`)."""
    host: str | None = None
    scheduler_pid: int | None = None
    """The process that claimed the tick (on `host`): while it lives, the tick is its to
    start or end; once it is gone, any service on the host reconciles it."""
    backfill: str | None = None
    """The backfill (`tickwork backfill`) that claimed the slot, if one did."""


class TickBuffered(TickEvent):
    """A claimed slot held back by its level's overlap policy until the ticks ahead end.

    `policy` is the overlap policy that held it (`buffer_one`, `buffer_all`,
    `cancel_other`); `behind` the ticks in flight when it was claimed.
    """

    type = "TickBuffered"
    slot: datetime | None = None
    policy: str
    behind: list[str] = Field(default_factory=list)


class RouteFallback(TickEvent):
    """A candidate failed on infrastructure (or is known to be down): the tick moves on.

    `to_target` is None when no candidate is left. `cached` marks a candidate passed over
    because a recent fallback recorded it down: only uncached ones feed the availability
    cache, so a dead endpoint is tried again once its TTL has passed.
    """

    type = "RouteFallback"
    from_target: str
    to_target: str | None
    reason: str
    cached: bool = False


class TargetSelfChecked(TickEvent):
    """A target of the catalog answered its self-check (or did not) before a tick ran there.

    A target with `selfcheck_required` runs ticks only after a passed check that no later
    uncached `RouteFallback` from it undid; `detail` says why a check failed.
    """

    type = "TargetSelfChecked"
    target: str
    passed: bool
    detail: str | None = None


class RoutePromoted(TickEvent):
    """A target's content retries are spent: the next attempt runs on its promotion."""

    type = "RoutePromoted"
    from_target: str
    to_target: str
    reason: str
    attempt: NonNegativeInt


class QuotaObserved(TickEvent):
    """What a tick learned of a target's quota: from its probe, or an answer's headers.

    Shared through the store like availability: a tick passes over a target whose latest
    observation (within its probe's TTL, or the answer's `retry_after_seconds`) says
    `exhausted`, with a `RouteFallback` whose reason starts with `quota`.
    """

    type = "QuotaObserved"
    target: str
    source: Literal["probe", "answer"]
    exhausted: bool
    remaining: float | None = None
    minimum: float | None = None
    requests_left: NonNegativeInt | None = None
    tokens_left: NonNegativeInt | None = None
    retry_after_seconds: float | None = None
    detail: str | None = None


class RateLimited(TickEvent):
    """A model call of the tick waited for its turn under a shared rate limit.

    `bucket` (`target:NAME`, `provider:HOST`, `level:NAME`) held it back last, for
    `reason` (`rpm`, `tpm`, `max_parallel`, or `retry_after` after a provider's 429).
    Not `taken`: its turn lay past the tick's remaining time, and the call was not made.
    """

    type = "RateLimited"
    call: NonNegativeInt
    bucket: str
    reason: Literal["rpm", "tpm", "max_parallel", "retry_after"]
    waited_ms: float
    taken: bool = True


class TickStarted(TickEvent):
    """The worker runs; a restarted service finds it (and its files) from this event."""

    type = "TickStarted"
    pid: int
    host: str
    attempt: NonNegativeInt = 1
    result_path: str | None = None
    log_path: str | None = None
    timeout_seconds: float | None = None
    runner_pid: int | None = None
    """The process watching the worker; while it lives, no other scheduler may adopt it."""
    template_hash: str | None = None
    """The hash of the tick's prompt template before substitution: its prompt version
    (None: recorded before tickwork kept it, or spend of no tick's prompt)."""


class TickTaken(TickEvent):
    """A `tickwork worker` took the tick's job (procrastinate executor).

    Appended at the stream's version as the worker read it: of two deliveries of one job
    (a redelivery, a retried stalled job) exactly one takes the tick, so it starts once.
    """

    type = "TickTaken"
    host: str
    worker_pid: int
    job_id: int
    worker_id: int | None = None
    """procrastinate's id of the worker (its heartbeat row)."""


WORKERS_STREAM = "workers"


class WorkerStarted(Event):
    """A `tickwork worker` began taking jobs.

    `status` and the API show it beside the worker's heartbeat: procrastinate keeps only
    the worker's id and last heartbeat.
    """

    type = "WorkerStarted"
    worker_id: int
    """procrastinate's id of the worker (its heartbeat row)."""
    host: str
    pid: int
    concurrency: int
    queues: list[str]

    @property
    def stream_id(self) -> str:
        """Every worker's start in one stream, read newest first."""
        return WORKERS_STREAM


THROTTLE_STREAM = "throttle"


class StartsSpaced(Event):
    """The infrastructure throttle every `tickwork worker` keeps: starts spaced apart.

    Until `until`, ticks start at least `spacing_seconds` apart across all workers;
    `last_start` is the latest start it let through. Appended after an attempt failed on
    infrastructure (widening it) and by each start while it holds, always at the stream
    version read, so of two workers starting at once one waits its turn.
    """

    type = "StartsSpaced"
    spacing_seconds: float
    until: datetime
    last_start: datetime
    tick_id: str | None = None
    """The tick whose start it let through; None after a failure widened it."""

    @property
    def stream_id(self) -> str:
        """One stream: its last event is the throttle in force."""
        return THROTTLE_STREAM


class ModelCallStarted(TickEvent):
    """A model call about to be sent, recorded before it is, with its estimated input size.

    A worker killed mid-call cannot record the call's spend; whoever ends the attempt
    books an estimated `BudgetSpent` for it (`harness.execution.cutoff`), so a call the
    upstream answered after the kill is still counted.
    """

    type = "ModelCallStarted"
    call: NonNegativeInt
    """The call's number in its worker process, from 1."""
    model: str
    estimated_input_tokens: NonNegativeInt
    template_hash: str | None = None
    """The hash of the tick's prompt template before substitution: its prompt version
    (None: recorded before tickwork kept it, or spend of no tick's prompt)."""
    billing: Billing = "api"
    """How the call is paid for: the start names no target, and a call cut off is booked
    from its start alone, billed as its target bills."""


class BudgetSpent(TickEvent):
    """The token spend of one finished model call, recorded the moment it finished."""

    type = "BudgetSpent"
    model: str
    prompt_tokens: NonNegativeInt
    completion_tokens: NonNegativeInt
    cache_read_tokens: NonNegativeInt | None = None
    cache_write_tokens: NonNegativeInt | None = None
    reasoning_tokens: NonNegativeInt | None = None
    """Output tokens the model spent reasoning, part of completion_tokens (None: not reported)."""
    cache_write_1h_tokens: NonNegativeInt | None = None
    """The part of cache_write_tokens written for an hour, billed at its own rate."""
    web_search_requests: NonNegativeInt | None = None
    """Server-side web searches the call ran, billed per use."""
    estimated: bool = False
    """True when the upstream reported no usage and the tokens were estimated from sizes."""
    cost_usd: NonNegativeFloat | None = None
    """What the call was booked at, under `price_source` (None: unpriced, or booked before
    calls were priced as they were booked: such spend is priced when it is read)."""
    price_source: str | None = None
    """Who priced the call when it was booked: `catalog:<target>`, `config`,
    `genai-prices@<version>` or `unpriced` (None: booked before tickwork recorded it)."""
    source: Literal["worker", "proxy", "runner"] = "worker"
    template_hash: str | None = None
    """The hash of the tick's prompt template before substitution: its prompt version
    (None: recorded before tickwork kept it, or spend of no tick's prompt)."""
    target: str | None = None
    """The catalog target the call went to, for `target:`/`provider:` budgets (None: no
    route, or booked by the runner for a call cut off, whose target it does not know)."""
    billing: Billing = "api"
    """How the call is paid for (`api` for spend booked before tickwork recorded it): a
    `subscription` call is worth `cost_usd` at list prices and is billed nothing."""

    @property
    def billed_usd(self) -> float | None:
        """What the call adds to the bill: its list value on `api`, 0 on a subscription."""
        return billed(self.cost_usd, self.billing)

    def usage(self) -> UsageParts:
        """The parts the call is billed on."""
        return UsageParts(
            self.prompt_tokens,
            self.completion_tokens,
            self.cache_read_tokens or 0,
            self.cache_write_tokens or 0,
            self.cache_write_1h_tokens or 0,
            self.web_search_requests or 0,
            1,
        )

    def priced(self, price: CallPrice | None) -> BudgetSpent:
        """This spend booked at `price`, with its source (None: left to be priced when read)."""
        if price is None:
            return self
        update = {"cost_usd": price.cost(self.usage()), "price_source": price.source}
        return self.model_copy(update=update)


class ToolCalled(TickEvent):
    """One tool call inside a tick, recorded for the trace and the per-tick tool cap."""

    type = "ToolCalled"
    name: str
    status: Literal["ok", "error", "cancelled", "killed"]
    """`cancelled`: refused by the tool cap, it never ran; `killed`: still running when its
    tick was cancelled, timed out or stopped, and ended with it."""
    duration_ms: float = 0.0


class AgentUsageChecked(TickEvent):
    """An agent CLI's own count of its tick's tokens beside what the tick's governor booked.

    The ledger holds what each call's answer reported as it passed; the CLI's final usage
    is only checked against it (never summed), so a mismatch shows in the tick's story.
    """

    type = "AgentUsageChecked"
    agent: str
    reported_prompt_tokens: NonNegativeInt
    reported_completion_tokens: NonNegativeInt
    booked_prompt_tokens: NonNegativeInt
    booked_completion_tokens: NonNegativeInt

    @property
    def matches(self) -> bool:
        """The CLI and the ledger agree to the token."""
        return (self.reported_prompt_tokens, self.reported_completion_tokens) == (
            self.booked_prompt_tokens,
            self.booked_completion_tokens,
        )


class ModelCalled(TickEvent):
    """One model call of a tick, answered or refused before any answer.

    Recorded by the worker the moment the call ends, right after the call's `BudgetSpent`
    (`budget_event_id` links the two; None when the call produced nothing to bill). `call`
    counts the tick's calls from 1; `attempt` counts tries of the same turn, as the SDK
    retries a throttled call. `error` is short and redacted.

    The predecessor's ledger also had a stage and a role per call; tickwork has neither:
    a tick runs one agent on one prompt, so every call's stage is its tick and `level`,
    and what a role chose there (model, capabilities) is here the route's `target`. Its
    template and hash are the prompt's, `template_hash`.
    """

    type = "ModelCalled"
    model: str
    target: str | None = None
    provider: str | None = None
    """The endpoint's host (and port, when not the scheme's): never a path, query or key."""
    call: NonNegativeInt = 1
    attempt: NonNegativeInt = 1
    duration_ms: float = 0.0
    wait_ms: float = 0.0
    """How long this try waited to be sent after the refused try before it: the SDK's
    retry backoff. 0 for a first attempt."""
    first_token_ms: float | None = None
    """From the request to the first streamed text or tool input; None when none came."""
    stop_reason: str | None = None
    error_class: str | None = None
    failure_class: FailureClass | None = None
    error: str | None = None
    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    estimated: bool = False
    budget_event_id: UUID | None = None
    template_hash: str | None = None
    """The hash of the tick's prompt template before substitution: its prompt version
    (None: recorded before tickwork kept it, or spend of no tick's prompt)."""


TRANSCRIPT_ITEM_CHARS = 4000
"""The most characters one transcript item keeps; the rest is cut, and the cut is marked."""

TranscriptKind = Literal["system", "prompt", "thinking", "assistant", "stopped", "tool"]
"""`thinking`: the reasoning a model streamed before its answer (Anthropic thinking blocks,
Responses reasoning summaries)."""


def capped(text: str, limit: int = TRANSCRIPT_ITEM_CHARS) -> tuple[str, int]:
    """`text` redacted, then cut to `limit` with the cut marked; also how many chars were cut.

    Redacting before cutting matters: a cut through a secret would leave its prefix, which
    no later redaction recognises.
    """
    text = redact(text)
    if len(text) <= limit:
        return text, 0
    cut = len(text) - limit
    return f"{text[:limit]}\n[… {cut:,} chars cut]", cut


class TranscriptEntry(TickEvent):
    """One item of a tick's transcript: its system text, prompt, an answer or a tool call.

    The transcript lives in the tick's stream, not in a file beside the result: it is then
    readable while the tick runs (`tickwork show --follow`, the dashboard), from any host
    that reaches the store, in one order with the tick's other events, redacted by the
    event encoding, and spooled with them when the store is down. Each item is capped
    (`capped`), so a tick adds a bounded amount per model or tool call.
    `stopped`: a hook (governor, daily budget) answered in the model's place.
    """

    type = "TranscriptEntry"
    kind: TranscriptKind
    text: str
    cut_chars: NonNegativeInt = 0
    tool: str | None = None
    tool_use_id: str | None = None
    arguments: str | None = None
    """The tool call's input as JSON, capped like `text` (the tool's output)."""
    arguments_cut_chars: NonNegativeInt = 0
    status: Literal["ok", "error", "cancelled", "killed"] | None = None


class TickAttemptFailed(TickEvent):
    """One failed attempt of a tick that will be tried again (not terminal)."""

    type = "TickAttemptFailed"
    attempt: NonNegativeInt
    failure_class: FailureClass
    reason: str
    retry_in_seconds: float


class HedgeStarted(TickEvent):
    """The attempt had no result after `after_seconds`: its twin tick `twin_id` starts beside it.

    The twin is a tick of its own (stream, spend, caps, budget); the first valid result of
    the two wins and the other is cancelled with reason `hedge_lost`.
    """

    type = "HedgeStarted"
    twin_id: str
    after_seconds: float


class HedgeDecided(TickEvent):
    """How the race of a hedged attempt ended: who gave the valid result, or None: neither."""

    type = "HedgeDecided"
    twin_id: str
    winner: Literal["original", "twin"] | None


class PanelMember(BaseModel):
    """How one member tick of a panel slot ended."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    tick_id: str
    status: str
    """completed, failed, timed_out or cancelled."""
    reason: str | None = None
    result_path: str | None = None


class PanelDecided(TickEvent):
    """Every member of a panel slot has ended; the slot's outcome lists each one's."""

    type = "PanelDecided"
    members: list[PanelMember]


class TerminalTickEvent(TickEvent):
    """The one event that ends a tick's stream; nothing of the tick is recorded after it."""


class TickCompleted(TerminalTickEvent):
    """The tick ended with a result; its tokens are the spend the ledger counts."""

    type = "TickCompleted"
    result_path: str | None = None
    stop_reason: str | None = None
    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    model_calls: NonNegativeInt = 0
    tool_calls: NonNegativeInt = 0
    tool_calls_cancelled: NonNegativeInt = 0


class TickFailed(TerminalTickEvent):
    """The tick ended without a usable result; `failure_class` says whether retrying could help."""

    type = "TickFailed"
    reason: str
    failure_class: FailureClass = "internal"
    stderr_tail: str = ""
    result_path: str | None = None


class TickTimedOut(TerminalTickEvent):
    """The tick ran past its timeout and its process group was stopped.

    `stderr_tail` is the end of its log when it was stopped: what it said last is kept
    with the event, wherever the log goes (another host, a retry appending to it, an
    archive), as a failed tick's is.
    """

    type = "TickTimedOut"
    timeout_seconds: float
    result_path: str | None = None
    stderr_tail: str = ""


class TickCancelled(TerminalTickEvent):
    """An operator (or shutdown) stopped the tick before it finished."""

    type = "TickCancelled"
    reason: str = ""


class TickSkipped(TerminalTickEvent):
    """The slot was claimed but not run, and `reason` says why (it still counts as handled)."""

    type = "TickSkipped"
    reason: Literal["overlap", "budget", "missed", "paused", "budget_forecast"]
    """`budget_forecast`: a slot missed while down that its level's budgets could not pay
    for by the forecast (`catch_up_budget = "fit"`)."""
    slot: datetime | None = None
    held: str | None = None
    """An `overlap` skip's holder: the level's tick in flight and why it still is (running
    for how long, or queued behind how many, the places and the start spacing)."""


class TickLost(TerminalTickEvent):
    """The tick's process or its owner vanished (crash, lost host): ended, it holds no place."""

    type = "TickLost"
    reason: str


class LevelPaused(Event):
    """No new tick of the level starts until it is resumed; `by` tells the operator who did it."""

    type = "LevelPaused"
    level: str
    reason: str
    by: str = "tickwork"
    note: str | None = None
    """The operator's note (`tickwork pause LEVEL --note …`): what to check before resuming."""


class LevelResumed(Event):
    """The level may start ticks again.

    Version 2: why, when tickwork resumed it itself (a budget's window rolled over).
    """

    type = "LevelResumed"
    version = 2
    level: str
    by: str = "operator"
    reason: str | None = None


class LevelResumedV1(LevelResumed):
    """A resume recorded before resumes said why (version 1)."""

    version = 1


class LevelBudgetExceeded(Event):
    """Recorded once per level and UTC day, when the first slot is skipped for budget."""

    type = "LevelBudgetExceeded"
    level: str
    day: str
    spent_tokens: int
    spent_usd: float | None
    reserved_tokens: int


BUDGET_CROSSINGS = UUID("5f1b7c4e-3a0d-4c55-9a63-0b2f8d6e1c42")
"""Namespace of `BudgetCrossed` ids: one per budget, window and threshold, in any replica."""
BUDGET_PROJECTIONS = UUID("9d3e6b27-41c8-4f0a-b5d2-7e18c4a06f93")
"""Namespace of `BudgetProjected` ids, as `BUDGET_CROSSINGS` for crossings."""


def budget_stream(name: str) -> str:
    """The stream of a `[[budgets]]` entry's crossings."""
    return f"budget-{name}"


class BudgetThreshold(Event):
    """A budget's window against one of its thresholds (`alert_at`, or 1.0: its limit).

    Its id follows from (budget, window start, threshold) in the namespace of its kind, so
    of every replica and every poll that sees it one event is stored.
    """

    namespace: ClassVar[UUID]
    budget: str
    scope: str
    window_start: str
    window_end: str
    threshold: float
    action: Literal["stop", "pause", "reroute"]
    used_tokens: int
    used_usd: float | None
    limit_tokens: int | None
    limit_usd: float | None

    @classmethod
    def id_for(cls, budget: str, window_start: str, threshold: float) -> UUID:
        """The event's id, the same in every replica."""
        return uuid5(cls.namespace, f"{budget}|{window_start}|{threshold:g}")

    @property
    def stream_id(self) -> str:
        """The budget's stream."""
        return budget_stream(self.budget)


class BudgetCrossed(BudgetThreshold):
    """A budget's window passed one of its thresholds.

    It alerts once per window, and a `pause` budget's levels are paused once per window
    (an operator's resume holds).
    """

    type = "BudgetCrossed"
    namespace = BUDGET_CROSSINGS
    levels: list[str] = []
    """The levels a `pause` budget paused."""


class BudgetProjected(BudgetThreshold):
    """At the window's rate so far, a threshold it has not reached is passed before its end.

    Warned once per budget, window and threshold, while there is time left to act.
    `reaches_at` is when the threshold is passed at that rate; `projected_*` the spend
    at the window's end.
    """

    type = "BudgetProjected"
    namespace = BUDGET_PROJECTIONS
    projected_tokens: int
    projected_usd: float | None
    reaches_at: datetime


GOVERNOR_STREAM = "governor"
"""Governor events of requests that belong to no tick (the proxy's other clients)."""


class GovernorEvent(Event):
    """Recorded in the tick's stream when a tick made the request, else in `governor`."""

    model: str
    source: Literal["worker", "proxy"]
    tick_id: str | None = None

    @property
    def stream_id(self) -> str:
        """A tick's governor events join its stream; the proxy's (no tick) share one stream."""
        return GOVERNOR_STREAM if self.tick_id is None else tick_stream(self.tick_id)


class GovernorFired(GovernorEvent):
    """A request reached the soft threshold (directive sent or deferred) or the hard ceiling."""

    type = "GovernorFired"
    decision: Literal["soft", "defer", "hard"]
    est_tokens: NonNegativeInt
    threshold: NonNegativeInt
    chars: NonNegativeInt
    chars_per_token: float


class CalibrationSampled(GovernorEvent):
    """A request's size and the prompt tokens its response reported: one calibration sample."""

    type = "CalibrationSampled"
    chars: NonNegativeInt
    prompt_tokens: NonNegativeInt
    cached_tokens: NonNegativeInt | None = None
    cached: bool = False
    """True when `prompt_tokens` leaves out the `cached_tokens` the server reused."""


CONTROL_STREAM = "control"
"""Operator requests to running services (cancel, and its clearing); every replica follows it.

A cancel scope stays in force until it is cleared: a tick it covers that is claimed
later, by any replica or by hand, does not start either."""


class CancelRequested(Event):
    """Cancel ticks of a level, or whose tick id starts with the scope, until cleared.

    Version 2: the scope stays in force (`CancelCleared` ends it).
    """

    type = "CancelRequested"
    version = 2
    scope: str
    by: str = "operator"
    why: str | None = None
    """Why, when tickwork itself asks (an overlap policy): the reason its ticks record."""

    def matches(self, level: str, tick_id: str) -> bool:
        """Whether a tick in flight falls under this request, by its level or a tick id prefix."""
        return self.scope == level or tick_id.startswith(self.scope)

    @property
    def reason(self) -> str:
        """What a tick it ends is recorded as cancelled for."""
        return self.why or f"cancelled by {self.by} (scope {self.scope!r})"


class OneShotCancelRequested(CancelRequested):
    """A cancel recorded before scopes lasted (version 1).

    It reached the ticks in flight when it was made and is never in force afterwards.
    """

    version = 1


BACKFILL_STREAM = "backfills"
"""Backfill requests and their cancels; every replica follows it and runs what is open."""


class BackfillEvent(Event):
    """Events of one backfill, all in BACKFILL_STREAM: services read the recent ones."""

    backfill_id: str

    @property
    def stream_id(self) -> str:
        """Every backfill in one stream, read from its end (a bounded window)."""
        return BACKFILL_STREAM


class BackfillRequested(BackfillEvent):
    """Run the slots of `level` in [`start`, `end`) that have no tick yet.

    Every replica runs it: each slot's claim is its tick id, so each slot runs once.
    """

    type = "BackfillRequested"
    level: str
    start: datetime
    end: datetime
    overlap: Literal["buffer_all", "allow", "skip"] = "buffer_all"
    max_at_once: PositiveInt = 1
    slots: NonNegativeInt
    """How many slots the range holds (claimed before or not)."""
    by: str = "operator"


class BackfillCancelled(BackfillEvent):
    """Stop a backfill: no more of its slots are claimed and its ticks in flight end."""

    type = "BackfillCancelled"
    by: str = "operator"


class BackfillFinished(BackfillEvent):
    """Every slot of the backfill's range is claimed and ended (any replica records it)."""

    type = "BackfillFinished"


class CancelCleared(Event):
    """A cancel scope stops being in force: ticks it covers may start again."""

    type = "CancelCleared"
    scope: str
    by: str = "operator"


def catalog_stream(revision: str) -> str:
    """One catalog revision's stream: created once, holding the catalog it names."""
    return f"catalog-{revision}"


class CatalogRecorded(Event):
    """A routing catalog was in force: its normalized content, under its revision.

    Recorded once per revision, so every decision's `catalog_revision` stays resolvable
    after the file is edited (`tickwork catalog show --revision`).
    """

    type = "CatalogRecorded"
    revision: str
    catalog: dict[str, Any]

    @property
    def stream_id(self) -> str:
        """The revision's own stream."""
        return catalog_stream(self.revision)


def config_stream(revision: str) -> str:
    """One levels revision's stream: created once, holding the levels' settings it names."""
    return f"config-{revision}"


CONFIG_STREAM = "config"
"""Reloads of `tickwork.toml`'s levels by any `tickwork run` replica, in order."""


class LevelsRecorded(Event):
    """The levels' effective settings a scheduler claimed ticks under, by their revision.

    Recorded once per revision, so a tick's `config_revision` stays resolvable after the
    file is edited, and a procrastinate worker runs a tick with the settings its slot was
    claimed under rather than with those of its own file.
    """

    type = "LevelsRecorded"
    revision: str
    levels: dict[str, dict[str, Any]]

    @property
    def stream_id(self) -> str:
        """The revision's own stream."""
        return config_stream(self.revision)


class ConfigReloaded(Event):
    """A running scheduler took new levels from its file (SIGHUP or an edit).

    Added levels fire from their next slot, removed ones stop firing (their ticks in flight
    finish), changed ones use the new settings from their next claimed slot. `restart`
    names the sections outside `levels` that changed and wait for a restart.
    """

    type = "ConfigReloaded"
    path: str
    revision: str
    previous_revision: str
    added: list[str] = []
    removed: list[str] = []
    changed: list[str] = []
    restart: list[str] = []
    host: str | None = None
    pid: int | None = None

    @property
    def stream_id(self) -> str:
        """Every replica's reloads in one stream."""
        return CONFIG_STREAM


def digest_stream(name: str) -> str:
    """One stream per digest: its periods are claimed in order, by expected version."""
    return f"digest-{name}"


class DigestEvent(Event):
    """Events of one digest period, in the digest's stream so periods are claimed in order."""

    name: str
    period_start: datetime
    period_end: datetime

    @property
    def stream_id(self) -> str:
        """The digest's stream, from its name, so every replica contends on the same one."""
        return digest_stream(self.name)


class DigestClaimed(DigestEvent):
    """This process builds and delivers the period; no other replica does."""

    type = "DigestClaimed"
    format: Literal["md", "html", "json"]
    content_hash: str
    """sha256 of the rendered digest, as written to `path`."""
    path: str
    targets: list[str]
    """`file:<folder>` or `env:<variable holding an apprise URL>`: never a URL itself."""
    host: str
    pid: int


class DigestDeliveryFailed(DigestEvent):
    """One delivery target refused the digest; the attempt is retried, the others still go out."""

    type = "DigestDeliveryFailed"
    target: str
    attempt: int
    error: str


class DigestPublished(DigestEvent):
    """The period's digest went out; `delivery` says how it went for each target."""

    type = "DigestPublished"
    format: Literal["md", "html", "json"]
    content_hash: str
    path: str
    targets: list[str]
    delivery: dict[str, str]
    """Target -> `ok` or `failed: <why>` (after its retries)."""


def alert_stream(key: str) -> str:
    """One stream per alert episode: created once, so one replica sends its alert."""
    return f"alert-{key}"


class AlertRaised(Event):
    """An episode worth telling the operator about; its stream's creation is the claim.

    `kind`: `paused` (tickwork paused the level), `budget` (the level's daily budget is
    spent), `failures` (that many failed ticks in a row), `lost` (a tick vanished).
    """

    type = "AlertRaised"
    key: str
    kind: Literal["paused", "budget", "failures", "lost"]
    level: str
    reason: str
    tick_id: str | None = None
    link: str | None = None
    targets: list[str]
    """`env:<variable holding apprise URLs>`: never a URL itself."""

    @property
    def stream_id(self) -> str:
        """The episode's stream, from its key, so every replica contends on the same one."""
        return alert_stream(self.key)


class AlertDelivered(Event):
    """How the alert's delivery went, per target: `ok` or `failed: <why>`."""

    type = "AlertDelivered"
    key: str
    delivery: dict[str, str]


ARCHIVE_STREAM = "archive"


class ArchiveSummary(BaseModel):
    """What a day's archive holds: its manifest and its `ArchiveWritten` both say it."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    day: date
    first_position: int
    last_position: int
    events: NonNegativeInt
    ticks: NonNegativeInt
    counts: dict[str, int]
    """Events per type."""
    sha256: str
    """Of the compressed data file, `events.jsonl.gz`."""


class ArchiveWritten(Event, ArchiveSummary):
    """A UTC day's closed ticks left for an archive, written and verified; deletion follows.

    Recorded after the archive's data file was re-read against its manifest and before any
    of its events leave the hot store: a rebuild reads every archive these events name,
    and an archive named here whose file is missing or does not verify is an error, not
    history quietly lost. `folder` is where it was written; a reader looks for the day's
    folder in the configured archive folder, so archives may be moved.
    """

    type = "ArchiveWritten"
    folder: str
    files: NonNegativeInt
    """Result and log files packed into the day's `files.tar.gz`."""

    @property
    def stream_id(self) -> str:
        """Every archive in one stream, read whole: one event per archived day."""
        return ARCHIVE_STREAM


Provider = Literal["openai", "anthropic"]
"""A provider whose usage and cost exports `tickwork reconcile` reads."""


def reconciliation_stream(provider: str) -> str:
    """A provider's reconciliations, in order: the last is what `/metrics` shows."""
    return f"reconciliation-{provider}"


class DriftRow(BaseModel):
    """One UTC day and model of a reconciliation: the provider's figures beside the ledger's.

    A figure is None where one side has none (an export of usage alone has no USD; a model
    without a price has no ledger USD). `drift` is the larger relative difference of
    tokens and USD, ledger against provider, signed (+: the ledger holds more).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    day: date
    model: str
    provider_tokens: NonNegativeInt | None
    ledger_tokens: NonNegativeInt
    provider_usd: float | None
    ledger_usd: float | None
    drift: float | None


class ReconciliationChecked(Event):
    """The ledger was compared with a provider's export, day by day and model by model.

    Kept small: the window, the tolerance, how many rows were compared and the largest
    drift among them, and the rows that drifted past the tolerance (the rest agreed).
    """

    type = "ReconciliationChecked"
    provider: Provider
    first_day: date
    last_day: date
    tolerance: float
    rows: NonNegativeInt
    max_drift: float
    """The largest absolute drift of any row (0 when every row agreed or had nothing to
    compare)."""
    drifted: list[DriftRow]

    @property
    def stream_id(self) -> str:
        """The provider's own stream."""
        return reconciliation_stream(self.provider)


EVENT_TYPES: dict[tuple[str, int], type[Event]] = {
    (cls.type, cls.version): cls
    for cls in (
        TickScheduled,
        TickBuffered,
        RouteFallback,
        RoutePromoted,
        QuotaObserved,
        RateLimited,
        TargetSelfChecked,
        TickStarted,
        TickTaken,
        WorkerStarted,
        StartsSpaced,
        ModelCallStarted,
        BudgetSpent,
        ToolCalled,
        ModelCalled,
        AgentUsageChecked,
        TranscriptEntry,
        TickAttemptFailed,
        HedgeStarted,
        HedgeDecided,
        PanelDecided,
        TickCompleted,
        TickFailed,
        TickTimedOut,
        TickCancelled,
        TickSkipped,
        TickLost,
        LevelPaused,
        LevelResumed,
        LevelResumedV1,
        LevelBudgetExceeded,
        BudgetCrossed,
        BudgetProjected,
        DigestClaimed,
        DigestDeliveryFailed,
        DigestPublished,
        CancelRequested,
        OneShotCancelRequested,
        CancelCleared,
        BackfillRequested,
        BackfillCancelled,
        BackfillFinished,
        AlertRaised,
        AlertDelivered,
        GovernorFired,
        CalibrationSampled,
        CatalogRecorded,
        LevelsRecorded,
        ConfigReloaded,
        ArchiveWritten,
        ReconciliationChecked,
    )
}


TERMINAL_TYPES = frozenset(
    cls.type for cls in EVENT_TYPES.values() if issubclass(cls, TerminalTickEvent)
)
"""Type names of the terminal events, for where only a stored record is at hand."""


def decode(stored: StoredEvent) -> Event | RawEvent:
    """The typed event for a stored record, or a RawEvent when its type is unknown here."""
    cls = EVENT_TYPES.get((stored.type, stored.version))
    if cls is None:
        return RawEvent(
            type=stored.type, version=stored.version, event_id=stored.event_id, data=stored.data
        )
    return cls.model_validate({**stored.data, "event_id": stored.event_id})
