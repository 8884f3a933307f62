"""What each budget stands at, for people, and the crossings it records: alerts and pauses.

`budget_statuses` is the table `tickwork budgets`, `GET /budgets`, the dashboard and the
digest show: per budget its window, used (from the budgets read model), reserved (by the
ticks in flight in its scope), remaining, the burn rate over the window so far and when
the window runs out at that rate (None: not before the window ends).

`BudgetWatch` is a companion of `tickwork run`: every few seconds it records a
`BudgetCrossed` for each threshold a budget's window has passed (its `alert_at`
fractions, and 1.0 at the limit). The event's id follows from (budget, window,
threshold), so however many replicas and polls see it, one is stored: the alerter
(`harness.scheduling.alerts`) alerts each once. A `pause` budget at its limit pauses the
levels it holds through the operator's own control (`who` = `budget`), once per window:
an operator who resumes a level is not overruled until the next window.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, computed_field

from harness.config import Settings
from harness.contracts import BudgetCrossed, BudgetRule
from harness.prices import format_usd
from harness.projections import level_paused
from harness.scheduling.budget import Budgets, held_by
from harness.scheduling.control import switch_level
from harness.store import EventStore, StoreError

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0
BUDGET_ACTOR = "budget"
"""Who a `pause` budget's pause is recorded as by."""


class BudgetStatus(BaseModel):
    """One budget's window as it stands, for people.

    The CLI, the API, the dashboard and the digest all show this one model, so all four
    say the same.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    scope: str
    window: str
    action: str
    window_start: datetime
    window_end: datetime
    limit_tokens: int | None
    limit_usd: float | None
    used_tokens: int
    used_usd: float | None
    """None: some of the window's spend is on a model without a price."""
    reserved_tokens: int
    calls: int
    burn_tokens_per_hour: float
    burn_usd_per_hour: float | None
    runs_out_at: datetime | None
    """At the burn rate so far, when the limit is reached (None: not within this window)."""
    alert_at: tuple[float, ...] = ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def remaining_tokens(self) -> int | None:
        """Tokens left after spend and reservations (None: no token limit)."""
        if self.limit_tokens is None:
            return None
        return self.limit_tokens - self.used_tokens - self.reserved_tokens

    @computed_field  # type: ignore[prop-decorator]
    @property
    def remaining_usd(self) -> float | None:
        """USD left after spend (None: no USD limit, or spend without a price)."""
        if self.limit_usd is None or self.used_usd is None:
            return None
        return self.limit_usd - self.used_usd

    @computed_field  # type: ignore[prop-decorator]
    @property
    def used_fraction(self) -> float:
        """The larger of tokens and USD used, as a fraction of its limit (1.0: unpriced USD)."""
        fractions = [0.0]
        if self.limit_tokens is not None:
            fractions.append(self.used_tokens / self.limit_tokens)
        if self.limit_usd is not None:
            fractions.append(1.0 if self.used_usd is None else self.used_usd / self.limit_usd)
        return max(fractions)

    def limit_text(self) -> str:
        """`500,000 tokens + USD 12.5`, for people."""
        parts = (
            f"{self.limit_tokens:,} tokens" if self.limit_tokens else "",
            f"USD {self.limit_usd:g}" if self.limit_usd else "",
        )
        return " + ".join(part for part in parts if part)

    def remaining_text(self) -> str:
        """Tokens and USD left, as far as the budget has each limit."""
        parts = (
            f"{self.remaining_tokens:,}" if self.remaining_tokens is not None else "",
            format_usd(self.remaining_usd) if self.limit_usd else "",
        )
        return " / ".join(part for part in parts if part)


def budget_statuses(budgets: Budgets, at: datetime | None = None) -> list[BudgetStatus]:
    """Every configured budget's current window, in the file's order (see module)."""
    at = at or datetime.now(UTC)
    rules = budgets.rules
    if not rules:
        return []
    spent = budgets.spent(rules, at)
    held = budgets.held()
    statuses = []
    for rule in rules:
        window = rule.window_at(at)
        used = spent[rule.name]
        hours = max((at - window.start).total_seconds() / 3600, 1 / 60)
        burn = used.tokens / hours
        burn_usd = None if used.usd is None else used.usd / hours
        statuses.append(
            BudgetStatus(
                name=rule.name,
                scope=rule.scope,
                window=rule.window,
                action=rule.action,
                window_start=window.start,
                window_end=window.end,
                limit_tokens=rule.tokens,
                limit_usd=rule.usd,
                used_tokens=used.tokens,
                used_usd=used.usd,
                reserved_tokens=held_by(rule, held),
                calls=used.calls,
                burn_tokens_per_hour=burn,
                burn_usd_per_hour=burn_usd,
                runs_out_at=_runs_out(rule, used.tokens, used.usd, burn, burn_usd, at, window.end),
                alert_at=rule.alert_at,
            )
        )
    return statuses


def _runs_out(
    rule: BudgetRule,
    tokens: int,
    usd: float | None,
    burn: float,
    burn_usd: float | None,
    at: datetime,
    end: datetime,
) -> datetime | None:
    """When the first limit is reached at the burn rate so far, if within the window."""
    hours: list[float] = []
    if rule.tokens is not None and burn > 0:
        hours.append(max(rule.tokens - tokens, 0) / burn)
    if rule.usd is not None and usd is not None and burn_usd:
        hours.append(max(rule.usd - usd, 0.0) / burn_usd)
    if not hours:
        return None
    when = at + timedelta(hours=min(hours))
    return when if when < end else None


@dataclass
class BudgetWatch:
    """Records budget crossings and pauses `pause` budgets' levels; a companion of `run`.

    The service's log tells each crossing and pause from the events (`log_feed`), in
    every replica, whichever recorded them.
    """

    settings: Settings
    store: EventStore
    budgets: Budgets
    recorded: set[tuple[str, str, float]] | None = None

    def run(self, stopping: threading.Event) -> None:
        """Poll until `stopping` is set; a store outage is waited out."""
        while not stopping.is_set():
            try:
                self.poll()
            except StoreError as exc:
                log.warning("budgets: store unavailable, trying again: %s", exc)
            stopping.wait(POLL_SECONDS)

    def poll(self, at: datetime | None = None) -> list[BudgetCrossed]:
        """Record the crossings not recorded yet; returns those this poll recorded."""
        recorded = self.recorded = self.recorded if self.recorded is not None else set()
        new: list[BudgetCrossed] = []
        for status in budget_statuses(self.budgets, at):
            start = status.window_start.isoformat()
            for threshold in (*status.alert_at, 1.0):
                key = (status.name, start, threshold)
                if status.used_fraction < threshold or key in recorded:
                    continue
                crossed = self._cross(status, threshold)
                recorded.add(key)
                if crossed is not None:
                    new.append(crossed)
        return new

    def _cross(self, status: BudgetStatus, threshold: float) -> BudgetCrossed | None:
        event_id = BudgetCrossed.id_for(status.name, status.window_start.isoformat(), threshold)
        event = BudgetCrossed(
            event_id=event_id,
            budget=status.name,
            scope=status.scope,
            window_start=status.window_start.isoformat(),
            window_end=status.window_end.isoformat(),
            threshold=threshold,
            action=status.action,
            used_tokens=status.used_tokens,
            used_usd=status.used_usd,
            limit_tokens=status.limit_tokens,
            limit_usd=status.limit_usd,
        )
        history = self.store.read_stream(event.stream_id)
        if any(stored.event_id == event_id for stored in history):
            return None
        if threshold >= 1.0 and status.action == "pause":
            event = event.model_copy(update={"levels": self._pause(status)})
        self.store.append(event.stream_id, [event.to_record()])
        return event

    def _pause(self, status: BudgetStatus) -> list[str]:
        """Pause the levels the budget holds that are not paused already."""
        rule = next(rule for rule in self.budgets.rules if rule.name == status.name)
        paused = []
        for level in self._levels_of(rule):
            if level_paused(self.store, level):
                continue
            reason = (
                f"budget {rule.name} ({rule.scope}, {rule.window}) spent: "
                f"{status.used_tokens:,} tokens until {status.window_end:%Y-%m-%d %H:%M} UTC"
            )
            switch_level(
                self.settings, self.store, level, pause=True, by=BUDGET_ACTOR, reason=reason
            )
            paused.append(level)
        return paused

    def _levels_of(self, rule: BudgetRule) -> Sequence[str]:
        if rule.levels is None:
            return list(self.settings.levels)
        return sorted(rule.levels)
