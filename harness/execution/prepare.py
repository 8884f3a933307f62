"""A tick's payload, built when the tick gets its place: model, prompt, budgets, paths.

Prompt templates use `$level`, `$slot` (ISO time of the slot, or "now" for a tick run by
hand) and `$previous_result` (the text of the level's last completed tick).
`string.Template` leaves any other `$` and all braces alone, so prompts may hold JSON or
code. The prompt is rendered here, not when the slot fires, so a queued tick never
starts with a previous result that went stale while it waited. The template's hash
before substitution (`template_hash`) names the prompt's version in the tick's start,
calls and spend, so spend can be grouped by it (`tickwork spend --by template`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from string import Template
from typing import Any

from harness.config import LevelConfig, Settings
from harness.contracts import (
    STORE_PASSWORD_ENV,
    TELEMETRY_HEADERS_ENV,
    BudgetRuleData,
    Calibration,
    CallPrice,
    OutputSchemaError,
    RagSettings,
    RateLimitPlan,
    ResultFileError,
    TickBudgets,
    TickPayload,
    TickStarted,
    TokenRates,
    load_output_schema,
    missing_key,
    read_result,
    secret_names,
    tick_id_for,
)
from harness.prices import PriceBook
from harness.projections import (
    BUDGET_WINDOWS,
    Projector,
    SharedCalibrations,
    previous_result_path,
    projector_for,
)
from harness.routing import (
    Catalog,
    Routed,
    Router,
    billing_of,
    configured_router,
    target_prices,
)
from harness.scheduling import Budgets, reservations_in_flight
from harness.store import EventStore, StoreError, split_password

log = logging.getLogger(__name__)

DEFAULT_TOOL_BUDGETS = {"min": 30, "hour": 300}
FALLBACK_TOOL_BUDGET = 30


class TickSetupError(Exception):
    """The tick cannot be started as asked (unknown level, no model, bad override)."""


def tool_budget(level: str, config: LevelConfig, env: Mapping[str, str]) -> int:
    """`TICKWORK_MAX_TOOL_CALLS_<LEVEL>` > `TICKWORK_MAX_TOOL_CALLS` > config > default."""
    for name in (f"TICKWORK_MAX_TOOL_CALLS_{level.upper()}", "TICKWORK_MAX_TOOL_CALLS"):
        if name in env:
            try:
                value = int(env[name])
            except ValueError:
                raise TickSetupError(f"{name}={env[name]!r} is not a whole number") from None
            if value < 0:
                raise TickSetupError(f"{name}={value} must not be negative")
            return value
    if config.max_tool_calls is not None:
        return config.max_tool_calls
    return DEFAULT_TOOL_BUDGETS.get(level, FALLBACK_TOOL_BUDGET)


def worker_env(
    env: Mapping[str, str], payload: TickPayload, store_url: str | None = None
) -> dict[str, str]:
    """The environment a tick's process gets: `env` without a secret the tick does not need.

    A `can_shell` tick can read all of its environment, so it holds the variables its own
    targets name (keys and endpoints) and the store's password, and no other secret: not
    the API token, alert or digest URLs, other targets' keys, nor any other `TICKWORK_*`
    setting (the payload carries what the worker needs of those). The telemetry settings
    (`OTEL_*`, the collector's headers with them) pass too: the worker takes them out of
    its environment once it has set up its exporter, before any tool runs. `store_url`:
    the configured store, whose password (taken out of the payload's URL) the worker gets
    as `PGPASSWORD`.
    """
    keep = payload.named_variables() | {STORE_PASSWORD_ENV, *TELEMETRY_HEADERS_ENV}
    drop = secret_names() - keep
    kept = {
        name: value
        for name, value in env.items()
        if name in keep or (name not in drop and not name.startswith("TICKWORK_"))
    }
    password = split_password(store_url)[1] if store_url else None
    if password is not None:
        kept[STORE_PASSWORD_ENV] = password
    return kept


def new_tick_id(level: str) -> str:
    """A tick id that sorts by level and start time and is unique across replicas."""
    return tick_id_for(level, datetime.now(UTC), uuid.uuid4().hex[:8])


@dataclass(frozen=True)
class TickRef:
    """What the runner needs to end a tick: enough to rebuild from its TickStarted event."""

    tick_id: str
    level: str
    result_path: Path
    log_path: Path
    timeout: float


@dataclass(frozen=True)
class PreparedTick:
    """A tick ready to launch: the payload and what the runner needs besides it."""

    payload: TickPayload
    timeout: float
    log_path: Path
    slot: datetime | None = None
    routed: Routed | None = None
    config: LevelConfig | None = None
    """The level's settings the tick runs with (its claim's, across a reload)."""

    def sibling(self, tick_id: str) -> PreparedTick:
        """The same payload run as another tick: a hedge's twin, a panel member.

        It has its own id, and its result file and log lie beside this one's.
        """
        payload = self.payload.model_copy(
            update={
                "tick_id": tick_id,
                "result_path": self.payload.result_path.with_name(f"{tick_id}.json"),
            }
        )
        return replace(self, payload=payload, log_path=self.log_path.with_name(f"{tick_id}.log"))

    def started(self, pid: int, attempt: int = 1) -> TickStarted:
        """What a runner records as attempt `attempt` of the tick launches as process `pid`.

        A worker's first record waits for it (`workers.recorder.STARTED_WAIT_SECONDS`).
        """
        payload = self.payload
        return TickStarted(
            tick_id=payload.tick_id,
            level=payload.level,
            pid=pid,
            host=socket.gethostname(),
            attempt=attempt,
            runner_pid=os.getpid(),
            result_path=str(payload.result_path),
            log_path=str(self.log_path),
            timeout_seconds=self.timeout,
            template_hash=payload.template_hash,
        )

    @property
    def ref(self) -> TickRef:
        """The handle the runner ends the tick by."""
        payload = self.payload
        return TickRef(
            payload.tick_id, payload.level, payload.result_path, self.log_path, self.timeout
        )


def previous_result_text(store: EventStore, projector: Projector, level: str) -> str:
    """The text of the level's last completed tick, for `$previous_result` ("" if none)."""
    projector.catch_up(["ticks"])
    path = previous_result_path(store, level)
    if not path:
        return ""
    try:
        return read_result(Path(path)).text
    except ResultFileError:
        return ""


TEMPLATE_HASH_CHARS = 16
"""Hex digits of sha256 kept: a level's prompt versions are few, and a report reads them."""


def template_hash(template: str) -> str:
    """The version of a prompt template: its text's sha256, before any substitution."""
    return hashlib.sha256(template.encode()).hexdigest()[:TEMPLATE_HASH_CHARS]


def render(template: str, level: str, slot: datetime | None, previous: str) -> str:
    """Fill the prompt's placeholders; an unknown `$name` stays as written."""
    context = {
        "level": level,
        "slot": slot.isoformat() if slot else "now",
        "previous_result": previous,
    }
    return Template(template).safe_substitute(context)


class Preparer:
    """Turns a claimed slot into a tick's payload: prompt, route, limits and calibrations."""

    def __init__(
        self,
        settings: Settings,
        store: EventStore | None,
        env: Mapping[str, str] | None = None,
        router: Router | None = None,
    ) -> None:
        """Raises CatalogError when `[routing] catalog` is set and invalid."""
        self.settings = settings
        self.store = store
        self.env = dict(os.environ if env is None else env)
        self._projector: Projector | None = None
        self._budgets: Budgets | None = None
        self._calibrated = None if store is None else SharedCalibrations(store)
        self.router = router or configured_router(settings)
        self._priced: tuple[Catalog | None, PriceBook] | None = None

    def prepare(
        self,
        level: str,
        prompt: str | None = None,
        timeout: float | None = None,
        tick_id: str | None = None,
        slot: datetime | None = None,
        routed: Routed | None = None,
        config: LevelConfig | None = None,
    ) -> PreparedTick:
        """The tick's payload; `routed`: the decision its slot was claimed with, if any.

        `config`: the level's settings its slot was claimed under; default: those in force.
        """
        config = config or self.settings.levels.get(level)
        if config is None:
            known = ", ".join(self.settings.levels) or "none"
            raise TickSetupError(f"no level named {level!r} in the configuration (known: {known})")
        routed = routed or self.route(level, slot or datetime.now(UTC))
        first = routed.plan.candidates[0] if routed else None
        if not config.model and first is None:
            raise TickSetupError(f"levels.{level}.model is not set: a tick needs a model")
        if first is None:
            self._refuse(level, config)
        if timeout is not None and timeout <= 0:
            raise TickSetupError(f"timeout must be positive, not {timeout}")
        tick_id = tick_id or new_tick_id(level)
        models = [c.model for c in routed.plan.candidates] if routed else [str(config.model)]
        folder = self.settings.paths.results / level / datetime.now(UTC).strftime("%Y-%m-%d")
        rag_on = config.rag and self.env.get("TICKWORK_RAG_DISABLED", "") not in ("1", "true")
        template = prompt if prompt is not None else self._template(level, config)
        text = template if prompt is not None else self._prompt(level, template, slot)
        timeout = timeout or config.timeout_for(len(text) + len(config.instructions))
        payload = TickPayload(
            tick_id=tick_id,
            level=level,
            prompt=text,
            template_hash=template_hash(template),
            instructions=config.instructions,
            model=first.model if first else config.model,
            api=first.api if first else config.api,
            agent=first.agent if first else config.agent,
            agents_dir=self.settings.agents.dir.absolute(),
            workdir=config.workdir.absolute() if config.workdir else None,
            effort=first.effort if first else config.effort,
            max_tool_calls=tool_budget(level, config, self.env),
            can_shell=config.can_shell,
            tools=config.capabilities.tier,
            web=config.web,
            rag=RagSettings(
                enabled=rag_on,
                index_path=self.settings.rag.index.absolute(),
                k=self.settings.rag.k,
                timeout_seconds=self.settings.rag.timeout_seconds,
            ),
            result_path=(folder / f"{tick_id}.json").absolute(),
            store_url=split_password(self.settings.store.url)[0],
            durability=self.settings.store.durability,
            spool_dir=self.settings.paths.spool.absolute(),
            route=routed.plan if routed else None,
            governor=self.settings.governor.limits(),
            calibrations=self._calibrations(models),
            budget=self._daily_budget(level, config, tick_id, models),
            rate_limits=self._rate_limits(config, routed, timeout),
            output=config.output,
            output_schema=self._output_schema(level, config),
            prices=self._prices(routed, config),
        )
        return PreparedTick(
            payload,
            timeout,
            (folder / f"{tick_id}.log").absolute(),
            slot,
            routed,
            config,
        )

    def _refuse(self, level: str, config: LevelConfig) -> None:
        """Refuse a tick of a level without a route that cannot run here, before it starts.

        Its agent CLI is not installed, or its protocol would go to the provider's own host
        without a key: every attempt would fail the same way, spend the retries and pause
        the level, where a refusal says at once what to set.

        Raises:
            TickSetupError: why, and what fixes it.
        """
        refused = self.settings.refusal(level, config)
        keyless = missing_key(config.api, self.env)
        if refused is None and keyless is not None:
            refused = f"levels.{level}: {keyless}"
        if refused is not None:
            raise TickSetupError(refused)

    def _template(self, level: str, config: LevelConfig) -> str:
        """The level's prompt, or its `prompt_file`'s text, as written."""
        template = config.prompt
        if config.prompt_file is not None:
            try:
                template = config.prompt_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise TickSetupError(
                    f"levels.{level}.prompt_file {config.prompt_file}: {exc.strerror}"
                ) from exc
            except UnicodeDecodeError as exc:
                raise TickSetupError(
                    f"levels.{level}.prompt_file {config.prompt_file}: not UTF-8 text: "
                    f"{exc.reason} at byte {exc.start}"
                ) from exc
        return template

    def _prompt(self, level: str, template: str, slot: datetime | None) -> str:
        """The template with its placeholders filled."""
        previous = ""
        if "$previous_result" in template and self.store is not None:
            previous = previous_result_text(self.store, self._projections(self.store), level)
        return render(template, level, slot, previous)

    def _output_schema(self, level: str, config: LevelConfig) -> dict[str, Any] | None:
        if config.output_schema is None:
            return None
        try:
            return load_output_schema(config.output_schema)
        except OutputSchemaError as exc:
            raise TickSetupError(f"levels.{level}.output_schema: {exc}") from exc

    def _projections(self, store: EventStore) -> Projector:
        if self._projector is None:
            self._projector = projector_for(store, PriceBook(self.settings.prices))
        return self._projector

    def _budgets_of(self, store: EventStore) -> Budgets:
        if self._budgets is None:
            prices = PriceBook(self.settings.prices)
            self._budgets = Budgets(
                store, self._projections(store), prices, self.settings, router=self.router
            )
        return self._budgets

    def _rate_limits(
        self, config: LevelConfig, routed: Routed | None, timeout: float
    ) -> RateLimitPlan | None:
        """The rate limits that may hold for the tick's calls.

        Its level's, its route's targets', and every provider host's: which host a call
        goes to is known in the worker, where an endpoint named by a variable is read.
        """
        targets = {}
        if routed is not None:
            for candidate in routed.plan.candidates:
                limit = routed.catalog.targets[candidate.target].rate_limit
                if limit is not None:
                    targets[candidate.target] = limit
        providers = dict(self.settings.rate_limits)
        if config.rate_limit is None and not targets and not providers:
            return None
        return RateLimitPlan(
            level=config.rate_limit,
            targets=targets,
            providers=providers,
            max_wait_seconds=timeout,
        )

    def _daily_budget(
        self, level: str, config: LevelConfig, tick_id: str, models: list[str]
    ) -> TickBudgets | None:
        """The budgets holding the tick, their windows' spend and the other ticks' reservations.

        The worker checks them before every call, adding what the log holds after the
        read model's checkpoint. The checkpoint is read before the spend: what is folded
        in between is counted twice by the worker (it stops early), never missed. A store
        that cannot be read leaves the check to the runner's, before every attempt.
        """
        if self.store is None:
            return None
        budgets = self._budgets_of(self.store)
        rules = [rule for rule in budgets.rules if rule.levels is None or level in rule.levels]
        if not rules:
            return None
        now = datetime.now(UTC)
        try:
            # No fold here: twenty ticks prepared at :00 would queue on its write lock.
            # The checkpoint is read first, so what is folded in between counts twice.
            position = budgets.windows.checkpoints()[BUDGET_WINDOWS]
            spent = budgets.spent(rules, now, fold=False)
            scoped: set[str] | None = set()
            for rule in rules:
                if rule.levels is None or scoped is None:
                    scoped = None
                else:
                    scoped |= rule.levels
            reservations = reservations_in_flight(
                self.store, self._projections(self.store), scoped, but=tick_id
            )
        except StoreError as exc:
            log.warning("spend unavailable, the tick's budget is checked between attempts: %s", exc)
            return None
        day = now.date().isoformat()
        prices = budgets.prices
        rates = {}
        for model in {*models, *([config.model] if config.model else []), *self._known_models()}:
            ladder = prices.rates(model, day)
            if ladder is not None:
                rates[model] = TokenRates(
                    input_per_mtok=ladder[0].input, output_per_mtok=ladder[0].output
                )
        return TickBudgets(
            budgets=[
                BudgetRuleData.of(
                    rule,
                    rule.window_at(now),
                    spent[rule.name].tokens,
                    spent[rule.name].usd,
                    spent[rule.name].list_usd,
                )
                for rule in rules
            ],
            after_position=position,
            reservations=reservations,
            rates=rates,
            reserve_model=config.model or models[0],
        )

    def _prices(self, routed: Routed | None, config: LevelConfig) -> list[CallPrice]:
        """The price of each model the tick may call, on its target: looked up here, once.

        Today's (UTC) prices, from the catalog the tick was routed by, then `[prices]`,
        then genai-prices: the worker books every call at them without loading a table,
        and bills it as the level, else its target, says (`billing_of`). The targets its
        candidates promote to are priced too: a promoted attempt books at its own.
        """
        catalog = routed.catalog if routed else None
        if self._priced is None or self._priced[0] is not catalog:
            targets = target_prices(catalog) if catalog else {}
            self._priced = (catalog, PriceBook(self.settings.prices, targets))
        book, day = self._priced[1], datetime.now(UTC).date().isoformat()
        if routed is None:
            found = [(book.call_price(str(config.model), day), billing_of(config, None))]
        else:
            found = [
                (
                    book.call_price(c.model, day, c.target),
                    billing_of(config, routed.catalog.targets.get(c.target)),
                )
                for c in routed.with_promotions()
            ]
        return [
            price if billing == price.billing else price.model_copy(update={"billing": billing})
            for price, billing in found
        ]

    def _known_models(self) -> set[str]:
        """Every model a tick may call: a wide budget counts other levels' spend too."""
        known = {level.model for level in self.settings.levels.values() if level.model}
        if self.router is not None:
            known |= {target.model for target in self.router.source.catalog.targets.values()}
        return known

    def _calibrations(self, models: list[str]) -> dict[str, Calibration]:
        """What the calibration read model learned of the tick's models, for its payload.

        A store that cannot be read costs the tick its head start only: it learns from the
        configured ratio, as one that starts without a store does.
        """
        if self._calibrated is None or not self.settings.governor.calibrate:
            return {}
        try:
            return self._calibrated.current(models)
        except StoreError as exc:
            log.warning(
                "calibration unavailable, the tick starts from the configured ratio: %s", exc
            )
            return {}

    def route(self, level: str, at: datetime) -> Routed | None:
        """The catalog's decision for a tick of `level` at `at` (None: no catalog or lane)."""
        return self.router.route(level, at) if self.router else None
