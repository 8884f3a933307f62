"""The tick payload: everything a worker needs, sent on its stdin as JSON.

It holds no secrets: API keys reach the worker through its environment only, so the
payload can be logged, stored and shown to an operator as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.contracts.agents import AgentKind
from harness.contracts.budgets import BudgetRuleData
from harness.contracts.calibration import Calibration
from harness.contracts.governor import GovernorLimits
from harness.contracts.pricing import Billing, CallPrice
from harness.contracts.rate_limits import RateLimitPlan
from harness.contracts.tiers import Capabilities, ToolTier, capabilities
from harness.contracts.wire import API_KEY_ENV_OF, BASE_URL_ENV, Api, Effort, require_effort

TICK_HEADER = "x-tickwork-tick"
"""Sent with every model request, so an upstream (or the fake one) can tell ticks apart."""


class RagSettings(BaseModel):
    """Whether the tick gets the `rag_lookup` tool, and the index and limits it queries with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    index_path: Path | None = None
    k: Annotated[int, Field(ge=1, le=5)] = 5
    timeout_seconds: Annotated[float, Field(gt=0, le=20)] = 20.0


class QuotaProbe(BaseModel):
    """How to ask a cloud target how much quota it has left, before a tick chooses it.

    An HTTP GET of `url` (with `header` set from the variable `header_env`, never from the
    catalog itself) or a `command` (argv, no shell); either answers JSON in which
    `remaining_path` (dotted, list indexes as numbers: `data.limits.0.remaining`) finds
    the quota left. Less than `minimum` left passes the target over. The answer is shared
    through the store for `ttl_seconds`, so ticks do not probe on every start.

    With `required_capacities` (`overall`, `model:<the target's model>`), as the earlier
    catalog's probes had them, `remaining_path` finds an object of capacities by name
    instead (`{"overall": 120, "model:gpt-4o": 0}`), and each one required must have
    `minimum` left: a model's own limit can run out while the account still has quota.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    url: Annotated[str, Field(pattern=r"^https?://\S+$")] | None = None
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    header: Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,64}$")] = "Authorization"
    header_env: Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")] | None = None
    remaining_path: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")]
    minimum: Annotated[float, Field(ge=0)] = 1.0
    required_capacities: (
        Annotated[
            list[Annotated[str, Field(pattern=r"^(overall|model:\S+)$")]], Field(min_length=1)
        ]
        | None
    ) = None
    ttl_seconds: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    timeout_seconds: Annotated[float, Field(gt=0, le=60)] = 5.0


class RouteCandidate(BaseModel):
    """One target of the routing catalog, as the worker needs it to build a model.

    The endpoint arrives as a URL or as the name of the variable holding it, the API key
    only as a variable name: the worker reads both from its own environment.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    target: Annotated[str, Field(min_length=1)]
    model: Annotated[str, Field(min_length=1)]
    api: Api = "openai-chat"
    agent: AgentKind = "strands"
    """Who runs the tick on this target: Strands in the tick process, or an agent CLI."""
    effort: Effort | None = None
    base_url: str | None = None
    base_url_env: str | None = None
    api_key_env: str | None = None
    quota_probe: QuotaProbe | None = None
    selfcheck_required: bool = False

    @model_validator(mode="after")
    def _effort_for_api(self) -> RouteCandidate:
        require_effort(self.api, self.effort)
        return self


class RoutePlan(BaseModel):
    """The decision's candidates in order; the worker falls back along them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    candidates: Annotated[list[RouteCandidate], Field(min_length=1)]
    availability_ttl_seconds: Annotated[float, Field(ge=0)] = 300.0


class TokenRates(BaseModel):
    """USD per million tokens of one model (its base tier), for the worker to price spend."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_mtok: Annotated[float, Field(ge=0)]
    output_per_mtok: Annotated[float, Field(ge=0)]

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD of that many tokens."""
        return (
            prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok
        ) / 1_000_000


class TickBudgets(BaseModel):
    """The budgets holding the tick, with what was spent and reserved when it was prepared.

    The worker adds the `BudgetSpent` recorded after `after_position` (by any tick) to
    each budget whose scope holds the call's level and target and whose window holds
    it, follows the reservations of the other ticks in flight (held from their
    `TickScheduled` until their terminal event, counted by the budgets holding their
    level), and calls no model once a `stop` or `pause` budget's spend plus those
    reservations pass its `tokens` or, priced with `rates`, its `usd`. Spend of a model
    without rates cannot be priced: a USD budget then counts as passed (fail-closed).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    budgets: list[BudgetRuleData]
    after_position: Annotated[int, Field(ge=0)]
    """The global position the budgets read model had folded up to, at most."""
    reservations: dict[str, tuple[str, Annotated[int, Field(ge=0)]]] = {}
    """Tick id -> (its level, tokens it reserved), of the other ticks in flight when prepared."""
    rates: dict[str, TokenRates] = {}
    """Model -> its rates, for the models the spend is expected in."""
    reserve_model: str | None = None
    """Whose input rate prices reservations (the level's model, as the scheduler does)."""


class TickPayload(BaseModel):
    """What the runner tells a worker; validated strictly on both sides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    tick_id: Annotated[str, Field(min_length=1, max_length=200)]
    level: Annotated[str, Field(min_length=1, max_length=100)]
    prompt: str
    template_hash: str | None = None
    """The prompt's version: the hash of its template before substitution (`$level`,
    `$slot`, `$previous_result`), recorded with the tick's start, calls and spend."""
    instructions: str = ""
    model: Annotated[str, Field(min_length=1)]
    api: Api = "openai-chat"
    agent: AgentKind = "strands"
    """Who runs the tick (the route's first candidate's when routed): `harness.contracts.agents`."""
    agents_dir: Path | None = None
    """Where the agent CLIs are installed (None: the project's `ops/agents`)."""
    workdir: Path | None = None
    """The folder an agent CLI works in (None: a fresh folder of the tick's own)."""
    effort: Effort | None = None
    max_tool_calls: Annotated[int, Field(ge=0)]
    can_shell: bool = False
    tools: ToolTier | None = None
    """The capability tier (`harness.contracts.tiers`); unset: `full` with `can_shell`."""
    web: bool = False
    rag: RagSettings = RagSettings()
    result_path: Path
    store_url: str
    durability: Literal["process", "power"] = "process"
    spool_dir: Path
    model_timeout_seconds: Annotated[float, Field(gt=0)] = 120.0
    route: RoutePlan | None = None
    """Set when a routing catalog chose the model; `model`, `api` and `effort` are its first."""
    governor: GovernorLimits = GovernorLimits()
    calibrations: dict[str, Calibration] = {}
    """What the calibration read model had learned of the tick's models when it was
    prepared: the tick starts from it and folds no read model itself (a fold takes the
    store's write lock, which a wave of ticks at :00 would queue on)."""
    budget: TickBudgets | None = None
    """Set when a budget holds the tick (`[[budgets]]`, or the level's daily keys): checked
    before every model call."""
    rate_limits: RateLimitPlan | None = None
    """Set when a rate limit may hold for the tick's calls: checked before every model call."""
    output: Literal["text", "json"] = "text"
    """`json`: the answer is parsed (and checked against `output_schema` when set)."""
    output_schema: dict[str, Any] | None = None
    prices: list[CallPrice] = []
    """The prices of the tick's models on its targets, looked up once when it was prepared:
    each call is booked at its price (a call of a model and target not among them is
    booked without, and priced when its spend is read)."""

    @model_validator(mode="after")
    def _effort_for_api(self) -> TickPayload:
        require_effort(self.api, self.effort)
        return self

    def billings(self) -> dict[str | None, Billing]:
        """How the tick's calls are paid for, by target (one not among `prices` is `api`)."""
        return {price.target: price.billing for price in self.prices}

    def capabilities(self) -> Capabilities:
        """What the tick's agent may do: its tier and whether web tools are on."""
        return capabilities(self.tools, self.can_shell, self.web)

    def own_folder(self) -> Path:
        """A folder of the tick's own beside its result file (an agent CLI's HOME lives there)."""
        return self.result_path.with_name(f"{self.tick_id}.agent")

    def work_folder(self) -> Path:
        """Where the tick's agent works: the level's `workdir`, else a fresh folder of its own.

        Never the service's working directory: a `read` tier would show it the service's
        configuration and store.
        """
        return self.workdir or self.own_folder() / "work"

    def key_variables(self) -> frozenset[str]:
        """The variables holding the API keys (and quota probe headers) of this tick's targets.

        They are the only secrets its environment may hold: a `can_shell` tick can read it.
        """
        if self.route is None:
            names = [API_KEY_ENV_OF[self.api]]
        else:
            names = [c.api_key_env or API_KEY_ENV_OF[c.api] for c in self.route.candidates]
            names += [c.quota_probe.header_env for c in self.route.candidates if c.quota_probe]
        return frozenset(name for name in names if name)

    def named_variables(self) -> frozenset[str]:
        """Every variable this tick's targets name: their keys' and their endpoints'.

        The worker reads them from its own environment, so each one reaches it whatever its
        prefix: a local target's `base_url_env = "TICKWORK_LOCAL_LLM_URL"` included.
        """
        if self.route is None:
            return self.key_variables() | {BASE_URL_ENV[self.api]}
        endpoints = {c.base_url_env for c in self.route.candidates if c.base_url_env}
        return self.key_variables() | endpoints
