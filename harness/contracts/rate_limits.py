"""Shared rate limits: what a scope allows a minute, and the plan a tick carries.

A limit (`rpm`, `tpm`, `max_parallel`) is set on a catalog target, on a provider host
(`[rate_limits."HOST"]`) or on a level; the tick's payload carries every one that may
hold for it (`RateLimitPlan`), and before each model call the worker takes its share
from each bucket in the scope of the candidate it calls (`scope`). The buckets live in
the store (`harness.store.rate_buckets`), so every process and host sharing it counts
against the same ones.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

Positive = Annotated[StrictInt, Field(gt=0)]
"""An integer above zero: a zero limit would stop every call, a bool is no count."""


class RateLimit(BaseModel):
    """What one scope allows: requests and tokens in any minute, calls in flight at once."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    rpm: Positive | None = None
    tpm: Positive | None = None
    max_parallel: Positive | None = None

    @property
    def empty(self) -> bool:
        """Whether it limits nothing (a scope without any of the three keys)."""
        return self.rpm is None and self.tpm is None and self.max_parallel is None


class ProviderRateLimit(RateLimit):
    """`[rate_limits."HOST"]`: a table there must limit something."""

    @model_validator(mode="after")
    def _limits_something(self) -> ProviderRateLimit:
        if self.empty:
            raise ValueError("set at least one of rpm, tpm or max_parallel")
        return self


Scope = tuple[str, RateLimit]
"""A bucket's key (`target:NAME`, `provider:HOST`, `level:NAME`) and its limit."""


def target_key(target: str) -> str:
    """The bucket of a catalog target; a provider's 429 tightens it for all its ticks."""
    return f"target:{target}"


def provider_key(host: str) -> str:
    """The bucket of a provider host (`api.openai.com`, `127.0.0.1:8080`)."""
    return f"provider:{host}"


def provider_host(url: str) -> str:
    """The host and non-default port of an endpoint URL, as `[rate_limits]` names it.

    Never its user, password or query, which may hold a key.
    """
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    port = parts.port
    return (parts.hostname or "") + (f":{port}" if port is not None and port != default else "")


def level_key(level: str) -> str:
    """The bucket of a level."""
    return f"level:{level}"


class RateLimitPlan(BaseModel):
    """The limits that may hold for a tick, and how long it may wait for its turn."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    level: RateLimit | None = None
    targets: dict[str, RateLimit] = {}
    """Catalog target -> its limit, for the targets of the tick's route that have one."""
    providers: dict[str, RateLimit] = {}
    """Provider host -> its limit (every one configured: the host is known in the worker)."""
    max_wait_seconds: Annotated[float, Field(gt=0)]
    """The tick's timeout: a turn further off than the tick's remaining time is not waited for."""

    def scope(self, level: str, target: str | None, provider: str) -> list[Scope]:
        """The buckets a call to `target` at `provider` takes from, in key order."""
        found: list[Scope] = []
        if self.level is not None and not self.level.empty:
            found.append((level_key(level), self.level))
        if target is not None and target in self.targets:
            found.append((target_key(target), self.targets[target]))
        if provider in self.providers:
            found.append((provider_key(provider), self.providers[provider]))
        return sorted(found, key=lambda scope: scope[0])
