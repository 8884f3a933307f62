"""Configuration: one TOML file (`tickwork.toml`) plus `TICKWORK_*` environment overrides.

The file is parsed here rather than by pydantic-settings' TOML source so that a syntax
error can name the file and line, and every validation error names the key path. Relative
paths (including a relative SQLite URL) are relative to the working directory, as the
defaults are: run the service from the directory that holds its state.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import quote
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.interval import IntervalTrigger
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from harness.config.budgets import budget_problems, legacy_budgets, resolve_budget
from harness.config.crontab import (
    DST_REPEATED,
    DST_SKIPPED,
    DstRepeated,
    DstSkipped,
    crontab_trigger,
)
from harness.config.governor import GovernorConfig
from harness.config.location import ENV_PREFIX, config_path
from harness.config.store_url import parse_store_url
from harness.config.windows import ScheduleLimits, SchedulingConfig, jitter_seconds
from harness.config.wording import describe, dotted
from harness.contracts import (
    ALERT_URLS_ENV,
    DEFAULT_AGENTS_DIR,
    STORE_PASSWORD_ENV,
    AgentKind,
    Api,
    Billing,
    BudgetEntry,
    BudgetRule,
    Capabilities,
    Durability,
    Effort,
    Positive,
    ProviderRateLimit,
    RateLimit,
    ToolTier,
    capabilities,
    load_output_schema,
    missing_agent,
    register_secret_names,
    register_secret_value,
    require_agent_api,
    require_effort,
)

HOME = Path(".tickwork")

MIN_TOKEN_LENGTH = 16
"""An API token shorter than this is too easy to guess."""

LEVEL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
"""Level names end up in env var names, stream ids and paths: keep them plain."""

_INTERVAL = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$")
_INTERVAL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_INTERVAL_SECONDS = 366 * 86400
"""A year: anything rarer is a cron schedule's job (and a huge one overflows datetimes)."""

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
"""Intervals are aligned to it, so every replica computes the same slots."""

STORE_BACKENDS = ("sqlite", "postgresql")


def _iana_zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone") from None
    return name


IanaZone = Annotated[str, AfterValidator(_iana_zone)]
"""A time zone name `zoneinfo` knows, such as `Europe/Berlin`."""


def _provider_host(host: str) -> str:
    if not PROVIDER_HOST.match(host):
        raise ValueError(
            f"{host!r} is not a provider host: a lowercase host name with an optional port "
            "(api.openai.com, 127.0.0.1:8080), no scheme, path or credentials"
        )
    return host


PROVIDER_HOST = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,252})(:[0-9]{1,5})?$")
ProviderHost = Annotated[str, AfterValidator(_provider_host)]
"""How a provider's endpoint is named in `[rate_limits]`, as a tick names it (its URL's host)."""


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file, key path and reason."""


class _Strict(BaseModel):
    # Validators are built on first use (`defer_build`): a command that reads its
    # configuration builds the sections it validates, not every model of the file.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class StoreConfig(_Strict):
    """`[store]`: where the event log lives and how hard a commit waits for the disk."""

    url: str = f"sqlite:///./{HOME}/events.db"
    durability: Durability = "process"
    """`process`: commits survive any process crash; `power`: also power loss (slower)."""
    connections: Annotated[int, Field(ge=1)] | None = None
    """PostgreSQL: the connection pool of each tickwork process. By default sized from what
    the process does at once (`harness.store.sizing`); set it only to go below that."""

    @field_validator("url")
    @classmethod
    def _database_url(cls, url: str) -> str:
        """Checked here so a bad URL stops every command with its key, not a traceback."""
        example = "like sqlite:///./.tickwork/events.db or postgresql://host/db"
        if "\0" in url:
            raise ValueError(f"holds a NUL byte; give a database URL {example}")
        try:
            backend = parse_store_url(url).backend
        except ValueError:
            raise ValueError(f"is not a database URL {example}") from None
        if backend not in STORE_BACKENDS:
            raise ValueError(f"backend {backend!r} is not supported: give a database URL {example}")
        return url


class PathsConfig(_Strict):
    """`[paths]`: the folders tickwork writes besides the store (results, spool, digests)."""

    results: Path = HOME / "results"
    spool: Path = HOME / "spool"
    digests: Path = HOME / "digests"
    """Every published digest is kept here (the events point at it)."""


class RetentionConfig(_Strict):
    """`[retention]`: how long closed ticks stay in the hot store before they are archived.

    A tick's events, result and log file leave the store and the results folder for one
    compressed archive per UTC day in `archive` (`tickwork archive`, and daily by
    `tickwork run`); its row in the ticks read model stays, so spend, counts and streaks
    stay exact.
    """

    hot_days: Annotated[int, Field(ge=1)] = 30
    """Closed ticks of a UTC day stay this many days in the hot store, then are archived."""
    transcript_days: Annotated[int, Field(ge=1)] | None = None
    """How long transcripts stay (at most `hot_days`; unset: `hot_days`). Older ones leave
    the hot store for their day's archive (`transcripts.jsonl.gz`) even while their ticks
    stay; `tickwork show TICK --archive` reads them back."""
    archive: Path = HOME / "archive"
    """One folder per archived UTC day: `<archive>/<YYYY-MM-DD>/events.jsonl.gz`, its
    `manifest.json` and `files.tar` (the day's result and log files)."""

    @model_validator(mode="after")
    def _transcripts_within_hot(self) -> RetentionConfig:
        if self.transcript_days is not None and self.transcript_days > self.hot_days:
            raise ValueError(
                f"transcript_days ({self.transcript_days}) exceeds hot_days ({self.hot_days}): "
                "a transcript cannot outlive the tick it belongs to in the hot store"
            )
        return self


class RagConfig(_Strict):
    """`[rag]`: the folder to index and how a tick's `rag_lookup` tool queries it."""

    folder: Path | None = None
    """Markdown and text files that `tickwork rag index` indexes."""
    index: Path = HOME / "rag.db"
    k: Annotated[int, Field(ge=1, le=5)] = 5
    timeout_seconds: Annotated[float, Field(gt=0, le=20)] = 20.0


class RunnerConfig(_Strict):
    """`[runner]`: how many ticks run at once, how they are stopped and retried."""

    grace_seconds: Annotated[float, Field(ge=0)] = 5.0
    """After a tick's timeout: SIGTERM to its process group, this long, then SIGKILL."""
    max_concurrent: Annotated[int, Field(ge=1)] = 4
    """Ticks running at once across all levels; more wait for a free place."""
    manual_max_concurrent: Annotated[int, Field(ge=1)] = 2
    """Ticks started by hand (`tickwork tick`) running at once in an executor's manual lane,
    beside the levels' caps and within `max_concurrent`."""
    start_spacing_seconds: Annotated[float, Field(ge=0)] = 0.25
    """Least time between two tick starts, so slots due together do not stampede."""
    shutdown_grace_seconds: Annotated[float, Field(ge=0)] = 30.0
    """On SIGTERM, running ticks get this long to finish before they are cancelled."""
    infra_retries: Annotated[int, Field(ge=0)] = 3
    """Retries of a tick failing on infrastructure (429, 5xx, timeouts, refused); then the
    level is paused until `tickwork resume`."""
    content_retries: Annotated[int, Field(ge=0)] = 1
    """Retries of a tick failing on content (empty text, invalid result)."""
    retry_backoff_seconds: Annotated[float, Field(ge=0)] = 2.0
    retry_backoff_max_seconds: Annotated[float, Field(ge=0)] = 60.0
    infra_throttle_seconds: Annotated[float, Field(ge=0)] = 60.0
    """After a tick's infrastructure failure, every start (of any level) is spaced by the
    backoff that failure chose, for this long: an outage is not hit by every level at
    once (0: off)."""
    launcher: Literal["warm", "cold"] = "warm"
    """How `tickwork run` starts tick processes: forked from a preloaded fork server
    (`warm`, about 20 times faster), or a fresh Python interpreter each (`cold`)."""


class ExecutorConfig(_Strict):
    """`[executor]`: where claimed ticks run: threads of `tickwork run`, or any host's worker."""

    kind: Literal["local", "procrastinate"] = "local"
    """`local`: in `tickwork run` itself. `procrastinate`: a job per tick on the PostgreSQL
    store, run by `tickwork worker`s on any host (PostgreSQL only)."""
    queue: str = "ticks"
    """The procrastinate queue tick jobs go to (a worker's `--queues` picks queues)."""
    stalled_seconds: Annotated[float, Field(gt=0)] = 30.0
    """A worker whose heartbeat is older than this is dead: its ticks end `TickLost`."""


class RoutingConfig(_Strict):
    """`[routing]`: the catalog that chooses a tick's model, and how long a failure counts."""

    catalog: Path | None = None
    """The routing catalog (`.toml` or `.json`); without one, each level's `model` runs."""
    availability_ttl_seconds: Annotated[float, Field(ge=0)] = 300.0
    """A target that failed on infrastructure is passed over this long by later ticks."""


def tick_page(public_url: str | None, tick_id: str) -> str | None:
    """The tick's dashboard page under `[api] public_url`, where alerts and digests link it.

    The page, not `/ticks/<id>`: that is the API's JSON, behind the bearer token.
    """
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/ui/ticks/{quote(tick_id, safe='')}"


class ApiConfig(_Strict):
    """`[api]`: where `tickwork serve` listens and the token that guards it."""

    host: str = "127.0.0.1"
    """Address `tickwork serve` binds; anything but loopback needs TICKWORK_API_TOKEN."""
    port: Annotated[int, Field(ge=1, le=65535)] = 8470
    refresh_seconds: Annotated[float, Field(ge=1)] = 5.0
    """How often the dashboard reloads its panels."""
    token: SecretStr | None = None
    """Bearer token every request must carry; from TICKWORK_API_TOKEN only, never the file."""
    public_url: Annotated[str, Field(pattern=r"^https?://[^\s/]+")] | None = None
    """Where operators reach the dashboard (`https://tickwork.example`): digests and alerts
    link ticks to their pages there."""

    @field_validator("token")
    @classmethod
    def _long_enough(cls, token: SecretStr | None) -> SecretStr | None:
        if token is not None and len(token.get_secret_value()) < MIN_TOKEN_LENGTH:
            raise ValueError(f"TICKWORK_API_TOKEN must be at least {MIN_TOKEN_LENGTH} characters")
        return token


class PriceOverride(_Strict):
    """USD per million tokens, and per request; a catalog target's, or `[prices."MODEL"]`'s.

    Wins over genai-prices (a target's over `[prices]`). A cache price left out bills
    cached tokens as input.
    """

    input_per_mtok: Annotated[float, Field(ge=0)]
    output_per_mtok: Annotated[float, Field(ge=0)]
    cache_read_per_mtok: Annotated[float, Field(ge=0)] | None = None
    cache_write_per_mtok: Annotated[float, Field(ge=0)] | None = None
    per_request_usd: Annotated[float, Field(ge=0)] = 0.0
    """USD each call costs on top of its tokens (a provider that bills per request)."""
    cache_write_1h_per_mtok: Annotated[float, Field(ge=0)] | None = None
    """Cache written for an hour, where the provider bills it apart (left out: at the
    cache write price)."""
    web_search_usd: Annotated[float, Field(ge=0)] | None = None
    """USD per server-side web search (left out: searches are not billed apart)."""


def parse_interval(text: str) -> int:
    """Seconds in an interval such as `30s`, `5m`, `1h`, `1d`."""
    match = _INTERVAL.match(text)
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"{text!r} is not an interval like '30s', '5m', '1h' or '1d'")
    seconds = int(match.group(1)) * _INTERVAL_UNITS[match.group(2)]
    if seconds > MAX_INTERVAL_SECONDS:
        raise ValueError(f"{text!r} is longer than the longest interval, 366d")
    return seconds


class Scheduled(_Strict):
    """Something that fires on a schedule: a level, a digest."""

    schedule: str | list[str] | None = None
    """Cron expression with five fields, e.g. `* * * * *`, or a list of them: the level
    fires at every time any of them names (once, where two name the same time)."""
    every: str | None = None
    """Interval, e.g. `30s`: alone, or beside `schedule` (it fires at both's times)."""
    timezone: IanaZone = "UTC"
    """IANA zone the cron schedule is read in (intervals are aligned to UTC)."""
    dst_repeated: DstRepeated | None = None
    """A wall-clock time the autumn night repeats (02:30 twice in Berlin): `first` fires
    one slot at its first instant, `last` at its second, `both` at each (two slots, two
    tick ids), `none` at neither. Default `[scheduling] dst_repeated` (`first`). A cron
    whose hour field is `*` fires every hour of elapsed time, both instants included,
    whatever this says."""
    dst_skipped: DstSkipped | None = None
    """A wall-clock time the spring night skips (02:30 in Berlin): `shift` fires one slot
    at the first instant after the gap (03:00), `skip` fires none. Default
    `[scheduling] dst_skipped` (`shift`)."""

    @field_validator("schedule")
    @classmethod
    def _cron(cls, schedule: str | list[str] | None) -> str | list[str] | None:
        """Built once here, so a schedule that cannot fire stops the load, not a wave."""
        if isinstance(schedule, list):
            if not schedule:
                raise ValueError("an empty list of cron expressions never fires")
            for index, each in enumerate(schedule):
                try:
                    _cron_expression(each)
                except ValueError as exc:
                    raise ValueError(f"schedule[{index}]: {exc}") from None
        elif schedule is not None:
            _cron_expression(schedule)
        return schedule

    @field_validator("every")
    @classmethod
    def _interval(cls, every: str | None) -> str | None:
        if every is not None:
            parse_interval(every)
        return every

    @model_validator(mode="after")
    def _one_schedule(self) -> Scheduled:
        if self.schedule is None and self.every is None:
            raise ValueError("set 'schedule' (cron), 'every' (interval), or both")
        return self

    @property
    def crons(self) -> list[str]:
        """The cron expressions of `schedule`, one or several."""
        if self.schedule is None:
            return []
        return [self.schedule] if isinstance(self.schedule, str) else list(self.schedule)

    @property
    def schedule_text(self) -> str:
        """The schedule as configured, on one line: `0 9 * * 1-5; every 30m`."""
        return "; ".join([*self.crons, *([f"every {self.every}"] if self.every else [])])

    def triggers(self) -> list[BaseTrigger]:
        """APScheduler's trigger of each cron expression and of the interval."""
        found: list[BaseTrigger] = [
            crontab_trigger(cron, self.timezone, *self.dst_rules()) for cron in self.crons
        ]
        if self.every is not None:
            found.append(
                IntervalTrigger(
                    seconds=parse_interval(self.every), start_date=EPOCH, timezone="UTC"
                )
            )
        return found

    def dst_rules(self) -> tuple[DstRepeated, DstSkipped]:
        """Its `dst_repeated` and `dst_skipped`; the defaults where unset (built in code)."""
        return self.dst_repeated or DST_REPEATED, self.dst_skipped or DST_SKIPPED

    def trigger(self) -> BaseTrigger:
        """The trigger of a schedule with a single spec (a digest's)."""
        return self.triggers()[0]


@cache
def _cron_expression(schedule: str) -> None:
    """Refuse a schedule that is no crontab or never fires; a good one is checked once."""
    if len(schedule.split()) != 5:
        raise ValueError(f"{schedule!r} is not a cron expression with 5 fields")
    try:
        trigger = crontab_trigger(schedule, timezone="UTC")
    except ValueError as exc:
        raise ValueError(f"{schedule!r} is not a valid cron expression: {exc}") from None
    if trigger.get_next_fire_time(None, datetime.now(UTC)) is None:
        raise ValueError(f"{schedule!r} never fires")


AlertKind = Literal["paused", "budget", "failures", "lost"]

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class AlertsConfig(_Strict):
    """`[alerts]`, or `[levels.<name>.alerts]` for one level (it replaces the global one).

    One alert per episode: a level tickwork paused (until resumed), a level over its daily
    budget (once a UTC day), `consecutive_failures` failed ticks in a row (until one
    completes), a tick lost.
    """

    notify: list[str] = [ALERT_URLS_ENV]
    """Names of environment variables holding apprise URLs (the URLs carry secrets)."""
    on: list[AlertKind] = ["paused", "budget", "failures", "lost"]
    consecutive_failures: Annotated[int, Field(ge=1)] = 3

    @field_validator("notify")
    @classmethod
    def _names(cls, notify: list[str]) -> list[str]:
        for name in notify:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"entry {name!r} must be the name of an environment variable "
                    "holding apprise URLs, not a URL itself (URLs carry secrets)"
                )
        return notify


Overlap = Literal["skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other", "allow"]
"""What a slot firing while a tick of its level is in flight becomes (`LevelConfig.overlap`)."""


class LevelConfig(Scheduled, ScheduleLimits):
    """`[levels.<name>]`: one recurring agent, what it is asked and the limits it runs within."""

    prompt: str = ""
    """Rendered per tick: $level, $slot and $previous_result (the last completed tick's text)."""
    prompt_file: Path | None = None
    """Read at every tick instead of `prompt` (edits apply without a restart)."""
    instructions: str = ""
    model: str | None = None
    api: Api = "openai-chat"
    """The wire protocol of the level's model (without a catalog): its endpoint and key come
    from that protocol's variables (`OPENAI_BASE_URL`/`OPENAI_API_KEY`,
    `ANTHROPIC_BASE_URL`/`ANTHROPIC_API_KEY`, `OLLAMA_HOST`)."""
    effort: Effort | None = None
    """Reasoning effort, as the level's `api` takes it (`harness.contracts.wire.EFFORTS`)."""
    agent: AgentKind = "strands"
    """Who runs the level's ticks: the Strands agent in the tick process, or an agent CLI
    (`claude-code`, `opencode`) as its child, under the same caps, ledger and lifecycle.
    A level whose CLI is not installed is refused alone (`Settings.refused_levels`): it
    never ticks, status and `levels` say why, the other levels run."""
    billing: Billing | None = None
    """How the level's calls are paid for: `api` (billed at their list value) or
    `subscription` (an agent CLI on a plan: booked with tokens and list value, billed 0).
    Wins over its catalog target's `billing`; unset: the target's, else `api`. A `usd`
    budget limits what is billed, `list_usd` the list value (`[[budgets]]`)."""
    workdir: Path | None = None
    """The folder an agent CLI works in (a repository); default a fresh folder per tick."""
    overlap: Overlap = "skip"
    """A slot firing while a tick of the level is in flight: `skip` records TickSkipped;
    `buffer_one` keeps one such slot to run when the level is free (and skips the rest);
    `buffer_all` keeps every one, to run one after another in slot order; `cancel_other`
    cancels the ticks in flight and starts the new one once they ended; `terminate_other`
    cancels them and starts it at once; `allow` runs it alongside."""
    catch_up_seconds: Annotated[float, Field(ge=0)] = 0
    """After downtime, the latest missed slot this recent runs once; other missed slots
    are recorded as skipped (missed)."""
    catch_up_budget: Literal["off", "fit"] = "off"
    """`fit`: after downtime, every missed slot within `catch_up_seconds` runs, newest
    first, as far as the level's budgets can pay by its forecast tick
    (`harness.scheduling.forecast`); the rest are recorded skipped (`budget_forecast`)."""
    priority: int = 100
    """When places are scarce, lower numbers start first (first come first within one)."""
    max_concurrent: Annotated[int, Field(ge=1)] | None = None
    """Ticks of this level running at once (the global `[runner] max_concurrent` still holds)."""
    daily_token_budget: Annotated[int, Field(gt=0)] | None = None
    """Prompt + completion tokens a UTC day; a slot that would start over it is skipped.
    Kept for older files: it becomes the `[[budgets]]` entry `level-<name>-daily`."""
    daily_usd_budget: Annotated[float, Field(gt=0)] | None = None
    tags: list[Annotated[str, Field(pattern=r"^[^\s:]+$")]] = []
    """Names `[[budgets]]` entries scope by (`scope = "tag:team-a"`), as spend reports group."""
    reserve_tokens: Annotated[int, Field(ge=0)] = 10_000
    """Held against the budget for each tick from its claim until it ends."""
    rpm: Positive | None = None
    """Model requests the level's ticks send in any minute, together (shared through the
    store by every process and host); a call over it waits its turn."""
    tpm: Positive | None = None
    """Tokens (prompt + completion) of the level's calls in any minute."""
    max_parallel: Positive | None = None
    """The level's model calls in flight at once."""
    timeout_seconds: Annotated[float, Field(gt=0)] = 300
    timeout_per_kchar: Annotated[float, Field(ge=0)] = 0
    """Seconds added to `timeout_seconds` per 1,000 characters of the tick's prompt and
    instructions, so a tick given more to read gets longer (the predecessor's per-stage
    timeout that grew with its input)."""
    content_retries: Annotated[int, Field(ge=0)] | None = None
    """Retries of a tick failing on content (empty text, JSON that does not parse or
    validate); default `[runner] content_retries`."""
    output: Literal["text", "json"] = "text"
    """`json`: the answer must be JSON (a fenced block is accepted), an object unless
    `output_schema` says otherwise; the result file carries the parsed value, and any other
    answer is a content failure."""
    output_schema: Path | None = None
    """A JSON Schema file (only with `output = "json"`) every answer must validate against;
    checked when the configuration loads, read again for each tick."""
    hedge_after_seconds: Annotated[float, Field(ge=0)] = 0
    """H: an attempt with no result after max(H, timeout / 2) gets one twin tick `<id>-h`;
    the first valid result wins, the other is cancelled (0: off). Local executor only."""
    panel: Annotated[int, Field(ge=1, le=20)] = 1
    """Ticks each slot runs, independently (`<slot>-p1` … `-pN`); when exactly one of two or
    more fails, one replacement `-pE` runs. Local executor only."""
    on_pause: Literal["stop", "finish"] | None = None
    """When the level is paused, its queued ticks end cancelled at once; `stop` cancels its
    running ticks too, `finish` lets them end. Unset: a pause tickwork decided (after
    infrastructure failures) stops them, an operator's lets them finish."""
    max_tool_calls: Annotated[int, Field(ge=0)] | None = None
    """Default 30 (`hour`: 300); TICKWORK_MAX_TOOL_CALLS[_<LEVEL>] in the environment wins."""
    can_shell: bool = False
    """Same as `tools = "full"` (kept for configurations written before the tiers)."""
    tools: ToolTier | None = None
    """What the tick's agent may do besides answering: `none`; `read` (files of its working
    folder); `files` (read, create, edit); `full` (files and a shell). Default: `full`
    with `can_shell`, else `none`. The same tier for every agent kind."""
    web: bool = False
    """Web tools (fetch, search) on top of the tier; off unless set."""
    rag: bool = False
    """Give this level the `rag_lookup` tool over the `[rag]` index."""
    alerts: AlertsConfig | None = None
    """Instead of the global `[alerts]` for this level's episodes."""

    @property
    def rate_limit(self) -> RateLimit | None:
        """The level's own rate limit, if it has one."""
        limit = RateLimit(rpm=self.rpm, tpm=self.tpm, max_parallel=self.max_parallel)
        return None if limit.empty else limit

    @property
    def has_budget(self) -> bool:
        """True when the level's own daily keys are set.

        A `[[budgets]]` entry may hold the level too: `Budgets.has_budget` (in
        `harness.scheduling.budget`) asks all of them.
        """
        return self.daily_token_budget is not None or self.daily_usd_budget is not None

    @model_validator(mode="after")
    def _effort_for_api(self) -> LevelConfig:
        require_effort(self.api, self.effort)
        require_agent_api(self.agent, self.api)
        return self

    @model_validator(mode="after")
    def _tier_or_shell(self) -> LevelConfig:
        if self.can_shell and self.tools not in (None, "full"):
            raise ValueError(
                f'can_shell = true means tools = "full"; it contradicts tools = "{self.tools}"'
            )
        return self

    @property
    def capabilities(self) -> Capabilities:
        """The tier and web switch every agent kind of this level runs under."""
        return capabilities(self.tools, self.can_shell, self.web)

    @model_validator(mode="after")
    def _one_prompt(self) -> LevelConfig:
        if self.prompt and self.prompt_file is not None:
            raise ValueError("set 'prompt' or 'prompt_file', not both")
        return self

    @model_validator(mode="after")
    def _output_schema(self) -> LevelConfig:
        if self.output_schema is not None:
            if self.output != "json":
                raise ValueError("'output_schema' needs output = \"json\"")
            load_output_schema(self.output_schema)
        return self

    def timeout_for(self, chars: int) -> float:
        """The whole-tick timeout for an input of `chars` characters."""
        return self.timeout_seconds + self.timeout_per_kchar * chars / 1000


class AgentsConfig(_Strict):
    """`[agents]`: where the pinned agent CLIs are installed (`npm ci --prefix <dir>`)."""

    dir: Path = DEFAULT_AGENTS_DIR


class DigestConfig(Scheduled):
    """A digest `tickwork run` publishes on its schedule, once per period."""

    period: str | None = None
    """The span each digest covers, ending at its slot (`1h`, `1d`); default: the time
    since the previous slot."""
    levels: list[str] = []
    """Levels the digest covers (default: all)."""
    format: Literal["md", "html", "json"] = "md"
    excerpt_chars: Annotated[int, Field(ge=0)] = 280
    """Length of each completed tick's text excerpt."""
    files: list[Path] = []
    """Folders a copy of each digest is written to."""
    notify: list[str] = []
    """Names of environment variables holding apprise URLs (Slack, Telegram, Matrix,
    mailto …): the URLs carry secrets, so the file names only where they are."""
    retries: Annotated[int, Field(ge=0)] = 3
    """Further attempts of a failed delivery, with exponential backoff."""
    retry_backoff_seconds: Annotated[float, Field(ge=0)] = 5.0
    """Wait before the first retry; it doubles with each (at most a minute)."""

    @model_validator(mode="after")
    def _period(self) -> DigestConfig:
        if len(self.triggers()) > 1:
            raise ValueError("a digest takes exactly one of 'schedule' (cron) or 'every'")
        if self.period is not None:
            parse_interval(self.period)
        for name in self.notify:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(
                    f"notify entry {name!r} must be the name of an environment variable "
                    "holding an apprise URL, not the URL itself (URLs carry secrets)"
                )
        return self


class Settings(BaseSettings):
    """Everything tickwork reads at start; environment variables win over the file."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="_",
        env_nested_max_split=1,
        extra="forbid",
        frozen=True,
    )

    store: StoreConfig = StoreConfig()
    paths: PathsConfig = PathsConfig()
    runner: RunnerConfig = RunnerConfig()
    rag: RagConfig = RagConfig()
    routing: RoutingConfig = RoutingConfig()
    executor: ExecutorConfig = ExecutorConfig()
    governor: GovernorConfig = GovernorConfig()
    api: ApiConfig = ApiConfig()
    agents: AgentsConfig = AgentsConfig()
    prices: dict[str, PriceOverride] = {}
    rate_limits: dict[ProviderHost, ProviderRateLimit] = {}
    """`[rate_limits."HOST"]`: `rpm`, `tpm`, `max_parallel` of every call to a provider host
    (`api.openai.com`, `127.0.0.1:8080`), whichever target or level sends it."""
    levels: dict[str, LevelConfig] = {}
    digests: dict[str, DigestConfig] = {}
    alerts: AlertsConfig = AlertsConfig()
    retention: RetentionConfig = RetentionConfig()
    budgets: list[BudgetEntry] = []
    """`[[budgets]]`: spend limits per scope and window (`harness.contracts.budgets`)."""

    def budget_entries(self) -> list[BudgetEntry]:
        """Every budget in force: the `[[budgets]]` entries, then the levels' daily keys."""
        return [*self.budgets, *legacy_budgets(self.levels)]

    def budget_rules(self, target_hosts: Mapping[str, str] | None = None) -> list[BudgetRule]:
        """The budgets resolved to the levels and targets they hold.

        `target_hosts`: catalog target -> its endpoint's host, to resolve `provider:`
        scopes (none without a catalog: such a budget then holds nothing).
        """
        return [
            resolve_budget(entry, self.levels, target_hosts or {})
            for entry in self.budget_entries()
        ]

    scheduling: SchedulingConfig = SchedulingConfig()

    def jitter_for(self, level: str) -> float:
        """Seconds of the level's jitter: its own `jitter`, else `[scheduling] jitter`."""
        own = self.levels[level].jitter
        return jitter_seconds(own if own is not None else self.scheduling.jitter)

    def alerts_for(self, level: str) -> AlertsConfig:
        """The level's own `[levels.<name>.alerts]`, else the global `[alerts]`."""
        own = self.levels[level].alerts if level in self.levels else None
        return own or self.alerts

    def refusal(self, name: str, level: LevelConfig | None = None) -> str | None:
        """Why level `name` cannot run on this host and how to fix it; None when it can.

        `level`: its settings, default those in force. A level on an agent CLI that is not
        installed here is refused alone rather than the whole file: the service schedules
        it no slot and a manual tick of it is refused, while every other level runs.
        """
        level = level or self.levels[name]
        missing = missing_agent(level.agent, self.agents.dir)
        return None if missing is None else f"levels.{name}.agent = {level.agent!r}: {missing}"

    def refused_levels(self) -> dict[str, str]:
        """Level -> its `refusal`, for each level that cannot run here (a look at the disk)."""
        return {name: why for name in self.levels if (why := self.refusal(name)) is not None}

    def replace_levels(self, levels: dict[str, LevelConfig]) -> None:
        """Put reloaded levels in force in every part of the process that shares this object.

        `levels` is the one part a running service takes anew from its file
        (`harness.scheduling.reload`); the rest stays frozen. The dict is swapped whole, not
        edited, so a reader holds either the old levels or the new ones, never a mixture.
        """
        object.__setattr__(self, "levels", dict(levels))

    def replace_budgets(self, budgets: list[BudgetEntry]) -> None:
        """Put reloaded `[[budgets]]` in force, as `replace_levels` does the levels.

        A raised limit lifts the pause its budget decided without a restart.
        """
        object.__setattr__(self, "budgets", list(budgets))

    @model_validator(mode="after")
    def _dst_defaults(self) -> Settings:
        """Levels and digests that set no DST rule take `[scheduling]`'s, in their own keys.

        Their triggers then carry the rule wherever they are built, and a reload sees a
        changed default as a change of the levels it applies to.
        """
        default = {
            "dst_repeated": self.scheduling.dst_repeated,
            "dst_skipped": self.scheduling.dst_skipped,
        }
        for section in ("levels", "digests"):
            configs: dict[str, Scheduled] = getattr(self, section)
            resolved = {
                name: config.model_copy(
                    update={
                        key: value for key, value in default.items() if getattr(config, key) is None
                    }
                )
                for name, config in configs.items()
            }
            object.__setattr__(self, section, resolved)
        return self

    @model_validator(mode="after")
    def _names(self) -> Settings:
        for kind, names in (("level", self.levels), ("digest", self.digests)):
            for name in names:
                if not LEVEL_NAME.match(name):
                    raise ValueError(
                        f"{kind} name {name!r} must match {LEVEL_NAME.pattern} "
                        "(it becomes part of env var names, stream ids and paths)"
                    )
        if self.routing.catalog is None:
            for name, level in self.levels.items():
                if not level.model:
                    raise ValueError(
                        f"levels.{name}.model is not set, and there is no [routing] catalog "
                        "to choose one: a tick needs a model"
                    )
        backend = parse_store_url(self.store.url).backend
        if self.executor.kind == "procrastinate" and backend != "postgresql":
            raise ValueError(
                f"executor.kind = 'procrastinate' needs a PostgreSQL store, and store.url is "
                f"{backend}: procrastinate's jobs live in the store's PostgreSQL"
            )
        for name, digest in self.digests.items():
            unknown = sorted(set(digest.levels) - set(self.levels))
            if unknown:
                raise ValueError(f"digests.{name}.levels names unknown level(s): {unknown}")
        problems = list(
            budget_problems(self.budgets, self.levels, self.routing.catalog is not None)
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """The file's content arrives as init kwargs; the environment must win over it."""
        return (env_settings, init_settings)


MAX_NESTING = 64
"""Tables and arrays a configuration file may nest: no setting comes near it, and the walks
over a document (the NUL check, validation) go one call deeper per level."""


def too_deep(data: Any, limit: int = MAX_NESTING) -> str | None:
    """The dotted path (its first parts) where `data` nests more than `limit` deep, if it does.

    Walked without recursion: a TOML table header may name thousands of levels, which the
    parser reads without recursing, and every walk that recurses would crash on.
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        value, loc = stack.pop()
        if len(loc) > limit:
            return ".".join(str(part) for part in loc[:4]) + ".…"
        if isinstance(value, dict):
            stack.extend((item, (*loc, key)) for key, item in value.items())
        elif isinstance(value, list):
            stack.extend((item, (*loc, index)) for index, item in enumerate(value))
    return None


def nul_paths(data: Any, loc: tuple[str | int, ...] = ()) -> Iterator[str]:
    """Dotted paths of the keys and strings in `data` that hold a NUL byte.

    Names and text from a file end up in events and read models, and PostgreSQL's text
    cannot hold a NUL: a model id with one stops the spend read model on every replica
    at the first call's BudgetSpent, rather than the load. A path is written only for a
    NUL found: a file of 1,000 levels has some 5,000 values.
    """
    if isinstance(data, str) and "\0" in data:
        yield dotted(loc)
    elif isinstance(data, dict):
        for key, value in data.items():
            if "\0" in str(key):
                yield f"{dotted(loc)}: a key"
            yield from nul_paths(value, (*loc, str(key).replace("\0", "\\0")))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from nul_paths(value, (*loc, index))


def read_toml(path: Path, what: str) -> dict[str, Any]:
    """A TOML file's tables, or a ConfigError naming the file and why it cannot be read."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    except RecursionError:
        raise ConfigError(f"{path}: invalid TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def load_settings(explicit: Path | None = None) -> Settings:
    """Read and validate the configuration, or raise ConfigError naming what is wrong."""
    path = config_path(explicit)
    data: dict[str, Any] = {}
    where = "environment/defaults"
    if path is not None:
        where = str(path)
        data = read_toml(path, "config file")
        deep = too_deep(data)
        if deep is not None:
            raise ConfigError(
                f"{path}: invalid configuration\n  {deep}: nested more than {MAX_NESTING} "
                "tables or arrays deep"
            )
        nul = [f"  {where}: holds a NUL byte" for where in nul_paths(data)]
        if nul:
            raise ConfigError(f"{path}: invalid configuration\n" + "\n".join(nul))
        if isinstance(data.get("api"), dict) and "token" in data["api"]:
            raise ConfigError(
                f"{path}: api.token: a secret is never kept in the file; set TICKWORK_API_TOKEN"
            )
    try:
        settings = Settings(**data)
    except ValidationError as exc:
        lines = "\n".join(f"  {describe(err, Settings)}" for err in exc.errors())
        raise ConfigError(f"{where}: invalid configuration\n{lines}") from exc
    except SettingsError as exc:
        # A TICKWORK_<SECTION> variable holds JSON that does not parse; pydantic-settings
        # names the field, and the value may be a secret, so it is not quoted.
        field = re.search(r'field "([^"]+)"', str(exc))
        name = f"TICKWORK_{field.group(1).upper()}" if field else "a TICKWORK_* variable"
        raise ConfigError(f"environment: {name}: not valid JSON for its section") from None
    except RecursionError:
        raise ConfigError("environment: a TICKWORK_* variable: nested too deeply") from None
    password = parse_store_url(settings.store.url).password
    if password:
        register_secret_value(STORE_PASSWORD_ENV, str(password))
    register_secret_names(name for digest in settings.digests.values() for name in digest.notify)
    alerts = [settings.alerts, *(level.alerts for level in settings.levels.values())]
    register_secret_names(name for config in alerts if config for name in config.notify)
    return settings
