"""The `[governor]` section, and the `GOV_*` environment names of earlier governors.

Operators moving from an earlier governor keep their unit files: `GOV_PORT`, `GOV_UPSTREAM`,
`GOV_THRESHOLD` and the rest are read on top of `tickwork.toml` and `TICKWORK_GOVERNOR_*`,
and a bad value is refused with the variable's name, like a bad key of the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, ValidationError

from harness.config.wording import plain
from harness.contracts import GovernorLimits

LEGACY_ENV = {
    "GOV_PORT": "port",
    "GOV_HOST": "host",
    "GOV_UPSTREAM": "upstream",
    "GOV_THRESHOLD": "soft_tokens",
    "GOV_HARD_CEILING": "hard_tokens",
    "GOV_CHARS_PER_TOKEN": "chars_per_token",
    "GOV_CALIBRATE": "calibrate",
    "GOV_LOG": "log",
    "GOV_DIRECTIVE": "directive",
    "GOV_HARDSTOP_MSG": "stop_message",
    "GOV_EXEMPT_MODELS": "exempt_models",
    "GOV_ANNOUNCE_URL": "announce_url",
    "GOV_ANNOUNCE_THROTTLE": "announce_throttle_seconds",
    "GOV_ANNOUNCE_TEXT": "announce_text",
}
DEFAULT_ANNOUNCE = (
    "The coding session is getting full: about {est} tokens (threshold {threshold}). "
    "Save its state and start a fresh session."
)


class GovernorConfig(GovernorLimits):
    """Limits for ticks and the proxy, plus where the proxy listens and forwards to."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8090
    upstream: str | None = None
    """Base URL the proxy forwards to; the request path is appended (`http://gw:4000`)."""
    anthropic_upstream: str | None = None
    """Where Anthropic Messages requests (`/v1/messages…`) go instead, when the `upstream`
    does not speak them (`https://api.anthropic.com`); unset: to the `upstream` too."""
    log: Path | None = None
    """A JSON-lines file with one line per chat request, written when its answer ended: the
    decision and estimate beside the exact prompt tokens, whether it streamed and the
    upstream's status (the status page keeps only 50)."""
    ledger_level: Annotated[str, Field(min_length=1, max_length=100)] = "proxy"
    """The level the proxy's `BudgetSpent` events are booked under in spend reports."""
    alert_episode_seconds: Annotated[float, Field(gt=0)] = 3600.0
    """A conversation quiet this long (or back under the threshold) starts a new episode."""
    upstream_idle_seconds: Annotated[float, Field(gt=0, le=3600)] = 120.0
    """The longest the upstream may stay silent within an answer before the proxy ends it
    with an error, so a stalled upstream does not hold the client."""
    rate_limit_wait_seconds: Annotated[float, Field(gt=0, le=3600)] = 60.0
    """How long a request waits for its turn under its upstream host's `[rate_limits]` at
    most; one whose turn is further off is answered 429 with a `retry-after`."""
    announce_url: Annotated[str, Field(pattern=r"^https?://\S+$")] | None = None
    """Where the proxy POSTs `{text, subject, source, priority}` when it cuts a session, as
    the earlier governor did for a voice pipeline (off unless set)."""
    announce_throttle_seconds: Annotated[float, Field(ge=0)] = 300.0
    """At most one announcement in this many seconds, over all sessions together."""
    announce_text: Annotated[str, Field(min_length=1, max_length=2000)] = DEFAULT_ANNOUNCE
    """`{est}` and `{threshold}` are filled in."""

    @property
    def public_upstream(self) -> str:
        """The upstream without any credentials in it, for logs, errors and the status page."""
        return without_credentials(self.upstream)

    @property
    def public_anthropic_upstream(self) -> str:
        """Where Anthropic requests go, without credentials."""
        return without_credentials(self.anthropic_upstream or self.upstream)

    def limits(self) -> GovernorLimits:
        """The limits alone, as the payload and the policy take them: no upstream, no address."""
        return GovernorLimits(**self.model_dump(include=set(GovernorLimits.model_fields)))


def without_credentials(url: str | None) -> str:
    """The URL without the user and password it may carry (empty for none)."""
    if not url:
        return ""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


class GovernorEnvError(ValueError):
    """A `GOV_*` variable holds a value the governor cannot use."""


def with_legacy_env(config: GovernorConfig, env: Mapping[str, str]) -> GovernorConfig:
    """The configuration with any `GOV_*` variables applied; they win over the file."""
    updates: dict[str, object] = {}
    for name, field in LEGACY_ENV.items():
        if name not in env:
            continue
        value: object = env[name]
        if field == "exempt_models":
            value = tuple(part.strip() for part in env[name].split(",") if part.strip())
        if field == "announce_url" and not env[name].strip():
            value = None  # the earlier governor's way to turn announcements off
        updates[field] = value
    if not updates:
        return config
    try:
        return GovernorConfig.model_validate({**config.model_dump(), **updates})
    except ValidationError as exc:
        problems = "; ".join(
            f"{_variable(err['loc'])}: {plain(err['msg'])}" for err in exc.errors()
        )
        raise GovernorEnvError(f"invalid governor environment: {problems}") from exc


def _variable(loc: tuple[int | str, ...]) -> str:
    names = [name for name, field in LEGACY_ENV.items() if loc and field == loc[0]]
    return names[0] if names else "GOV_*"
