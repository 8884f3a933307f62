"""Budgets as data: a `[[budgets]]` entry, its window, its scope, and the figures a check needs.

Plain data every stage shares: the configuration validates entries with `BudgetEntry`, the
scheduler, the runner and the worker check spend against the same `BudgetRule`s, and the
read model buckets spend by the same `window_of`. A window is a span of wall-clock time in
the budget's zone (a `day` across a DST change is 23 or 25 hours long, a `month` ends at
the next month's first midnight there), or the rolling `24h` before now, kept in whole UTC
hours: an hour's spend leaves it when the whole hour is more than 24 hours old, so the
rolling window counts at most one hour of older spend (it errs towards stopping).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.contracts.pricing import Billing

BudgetWindow = Literal["day", "week", "month", "24h"]
UsdUnit = Literal["usd", "list_usd"]
"""A budget's USD limit: on what the spend is billed, or on its list value."""
BudgetAction = Literal["stop", "pause", "reroute"]
SCOPE_KINDS = ("level", "target", "provider", "tag")
SCOPE_PATTERN = r"^(global|(level|target|provider|tag):[^\s:]+)$"
BUDGET_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
ROLLING_BUCKET = timedelta(hours=1)


def _zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone") from None
    return name


class BudgetEntry(BaseModel):
    """One `[[budgets]]` entry, as the operator writes it.

    `tokens` counts prompt plus completion tokens; `usd` limits what the spend is billed
    (its tokens at the model's rates, 0 for a call on a subscription), `list_usd` what it
    is worth at those rates however it is paid for: a subscription level is never stopped
    by a `usd` limit, and is by a `list_usd` one. `alert_at` are fractions of the limit
    at which one alert per window is sent (the limit itself always alerts). `reroute`
    only makes sense where a lane can choose another candidate: a `target:` or
    `provider:` scope.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    name: Annotated[str, Field(pattern=BUDGET_NAME_PATTERN)]
    scope: Annotated[str, Field(pattern=SCOPE_PATTERN)]
    window: BudgetWindow = "day"
    timezone: Annotated[str, AfterValidator(_zone)] = "UTC"
    tokens: Annotated[int, Field(gt=0)] | None = None
    usd: Annotated[float, Field(gt=0)] | None = None
    list_usd: Annotated[float, Field(gt=0)] | None = None
    alert_at: list[Annotated[float, Field(gt=0, lt=1)]] = []
    action: BudgetAction = "stop"

    @field_validator("alert_at")
    @classmethod
    def _increasing(cls, alert_at: list[float]) -> list[float]:
        if any(b <= a for a, b in itertools.pairwise(alert_at)):
            raise ValueError("thresholds must be strictly increasing fractions of the limit")
        return alert_at

    @model_validator(mode="after")
    def _coherent(self) -> BudgetEntry:
        if self.tokens is None and self.usd is None and self.list_usd is None:
            raise ValueError("a budget needs a limit: set 'tokens', 'usd', 'list_usd' or several")
        if self.action == "reroute" and self.scope_kind not in ("target", "provider"):
            raise ValueError(
                f"action 'reroute' needs a 'target:' or 'provider:' scope (a lane can only "
                f"skip a candidate), and scope is {self.scope!r}"
            )
        if self.action == "pause" and self.scope_kind in ("target", "provider"):
            raise ValueError(
                f"action 'pause' pauses levels: it needs a 'global', 'level:' or 'tag:' "
                f"scope, and scope is {self.scope!r} (use 'stop' or 'reroute')"
            )
        if self.window == "24h" and self.timezone != "UTC":
            raise ValueError("a rolling '24h' window has no time zone: leave 'timezone' unset")
        return self

    @property
    def scope_kind(self) -> str:
        """`global`, `level`, `target`, `provider` or `tag`."""
        return self.scope.split(":", 1)[0]

    @property
    def scope_name(self) -> str:
        """What the scope names after its colon ("" for `global`)."""
        return self.scope.split(":", 1)[1] if ":" in self.scope else ""


@dataclass(frozen=True)
class Window:
    """A budget window in UTC: spend at `start` <= t < `end` counts."""

    start: datetime
    end: datetime


def window_of(window: BudgetWindow, zone: str, at: datetime) -> Window:
    """The window of kind `window` in time zone `zone` that holds the instant `at`.

    Calendar windows are computed in local wall-clock time and converted back, so their
    length follows DST (a day of 23 or 25 hours) and the month's length. The rolling
    window ends at the end of `at`'s UTC hour and spans the 24 hours before.
    """
    at = at.astimezone(UTC)
    if window == "24h":
        end = at.replace(minute=0, second=0, microsecond=0) + ROLLING_BUCKET
        return Window(end - timedelta(hours=24), end)
    tz = ZoneInfo(zone)
    local = at.astimezone(tz).date()
    if window == "day":
        first, after = local, local + timedelta(days=1)
    elif window == "week":
        first = local - timedelta(days=local.weekday())
        after = first + timedelta(days=7)
    else:
        first = local.replace(day=1)
        after = (first + timedelta(days=32)).replace(day=1)
    return Window(_midnight(first, tz), _midnight(after, tz))


def _midnight(day: date, tz: ZoneInfo) -> datetime:
    start = datetime.combine(day, datetime.min.time(), tzinfo=tz)
    return start.astimezone(UTC)


def bucket_of(window: BudgetWindow, zone: str, at: datetime) -> datetime:
    """The read model's bucket for spend at `at`: its window's start, or its UTC hour (24h)."""
    if window == "24h":
        return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return window_of(window, zone, at).start


@dataclass(frozen=True)
class BudgetRule:
    """A budget ready to check: its entry with its scope resolved to levels and targets.

    `levels`/`targets` None: any. A spend event counts when its level and its target are
    both in scope. `targets` of a level- or tag-scoped budget is None, so spend without a
    catalog target counts there; a target- or provider-scoped one counts only spend
    booked on its targets.
    """

    name: str
    scope: str
    window: BudgetWindow
    zone: str
    tokens: int | None
    usd: float | None
    alert_at: tuple[float, ...]
    action: BudgetAction
    levels: frozenset[str] | None
    targets: frozenset[str] | None
    list_usd: float | None = None
    """The limit on the list value of the spend; `usd` limits what it is billed."""

    def usd_limits(self, billing: Billing) -> list[tuple[UsdUnit, float]]:
        """The USD limits that hold spend paid for by `billing`, each with its unit.

        What is billed (`usd`) holds `api` spend alone: a subscription adds nothing to it.
        The list value (`list_usd`) holds any.
        """
        limits: list[tuple[UsdUnit, float | None]] = [("list_usd", self.list_usd)]
        if billing == "api":
            limits.insert(0, ("usd", self.usd))
        return [(unit, limit) for unit, limit in limits if limit is not None]

    def covers(self, level: str, target: str | None = None) -> bool:
        """Whether spend of `level` on `target` counts against this budget."""
        if self.levels is not None and level not in self.levels:
            return False
        return self.targets is None or (target is not None and target in self.targets)

    def covers_level(self, level: str) -> bool:
        """Whether the level's ticks are held to this budget whatever target they use."""
        return self.targets is None and (self.levels is None or level in self.levels)

    def window_at(self, at: datetime) -> Window:
        """This budget's window holding `at`."""
        return window_of(self.window, self.zone, at)

    @cached_property
    def fingerprint(self) -> str:
        """What the read model's rows of this budget were folded under (sha256, short).

        Worked out once: a fold asks it for every spend event, and a tag's budget hashes
        its thousand levels each time.
        """
        body = json.dumps(
            [
                self.name,
                self.window,
                self.zone,
                sorted(self.levels) if self.levels is not None else None,
                sorted(self.targets) if self.targets is not None else None,
            ]
        )
        return hashlib.sha256(body.encode()).hexdigest()[:16]


class BudgetRuleData(BaseModel):
    """A `BudgetRule` as the tick payload carries it to the worker."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str
    scope: str
    window: BudgetWindow
    zone: str
    tokens: int | None = None
    usd: float | None = None
    list_usd: float | None = None
    action: BudgetAction = "stop"
    levels: list[str] | None = None
    targets: list[str] | None = None
    spent_tokens: Annotated[int, Field(ge=0)] = 0
    spent_usd: Annotated[float, Field(ge=0)] | None = 0.0
    """USD billed for the window's spend when prepared; None when some of it has no price."""
    spent_list_usd: Annotated[float, Field(ge=0)] | None = 0.0
    """The list value of the window's spend when prepared; None when some has no price."""
    window_start: datetime
    window_end: datetime

    @classmethod
    def of(
        cls,
        rule: BudgetRule,
        window: Window,
        tokens: int,
        usd: float | None,
        list_usd: float | None,
    ) -> BudgetRuleData:
        """The rule with its window and spend (billed `usd`, `list_usd`), for the payload."""
        return cls(
            name=rule.name,
            scope=rule.scope,
            window=rule.window,
            zone=rule.zone,
            tokens=rule.tokens,
            usd=rule.usd,
            list_usd=rule.list_usd,
            action=rule.action,
            levels=sorted(rule.levels) if rule.levels is not None else None,
            targets=sorted(rule.targets) if rule.targets is not None else None,
            spent_tokens=tokens,
            spent_usd=usd,
            spent_list_usd=list_usd,
            window_start=window.start,
            window_end=window.end,
        )

    def rule(self) -> BudgetRule:
        """Back to the rule the worker checks."""
        return BudgetRule(
            name=self.name,
            scope=self.scope,
            window=self.window,
            zone=self.zone,
            tokens=self.tokens,
            usd=self.usd,
            alert_at=(),
            action=self.action,
            levels=frozenset(self.levels) if self.levels is not None else None,
            targets=frozenset(self.targets) if self.targets is not None else None,
            list_usd=self.list_usd,
        )
