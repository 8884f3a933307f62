"""What each budget stands at, for people, and the crossings it records: alerts and pauses.

`budget_statuses` is the table `tickwork budgets`, `GET /budgets`, the dashboard and the
digest show: per budget its window, used (from the budgets read model), reserved (by the
ticks in flight in its scope), remaining, the burn rate over the window so far, the spend
projected at the window's end at that rate and when the window runs out at it (None: not
before the window ends). The rate is the window's spend over its elapsed time: the read
model keeps one row per budget and window, so a thousand budgets cost a thousand rows
whatever the history, where a trailing rate would need finer buckets or a scan of spend.
In a rolling `24h` window it is the last day's rate.

`BudgetWatch` also warns before a threshold is crossed: once a tenth of a window has
passed (`WARM_UP`: earlier, one tick's spend extrapolates to the whole window), a
threshold the window has not reached but its projection has is recorded as a
`BudgetProjected`, one per budget, window and threshold, its id chosen as a crossing's.

`BudgetWatch` is a companion of `tickwork run`: every few seconds it records a
`BudgetCrossed` for each threshold a budget's window has passed (its `alert_at`
fractions, and 1.0 at the limit). The event's id follows from (budget, window,
threshold), so however many replicas and polls see it, one is stored: the alerter
(`harness.scheduling.alerts`) alerts each once. A `pause` budget at its limit pauses the
levels it holds through the operator's own control (`who` = `budget`), once per window:
an operator who resumes a level is not overruled until the next window. A level a budget
paused resumes by itself (`LevelResumed`, `by` = `budget`) once no `pause` budget holding
it is at its limit: its window rolled over, or a reload raised or removed the limit.
The resume's id follows from the pause's, so replicas record it once; a pause an
operator or tickwork's failure handling decided is never lifted here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid5

from pydantic import BaseModel, ConfigDict, computed_field

from harness.config import Settings
from harness.contracts import (
    Billing,
    BudgetCrossed,
    BudgetProjected,
    BudgetRule,
    BudgetThreshold,
    LevelResumed,
    budget_stream,
    level_stream,
)
from harness.prices import format_usd
from harness.projections import level_paused, pauses
from harness.scheduling.budget import Budgets, held_by
from harness.scheduling.control import switch_level
from harness.store import EventStore, StoreError

log = logging.getLogger(__name__)

POLL_SECONDS = 5.0
WARM_UP = 0.1
"""The fraction of its window that passes before a budget's projection may warn."""
BUDGET_ACTOR = "budget"
"""Who a `pause` budget's pause (and its own resume) is recorded as by."""
BUDGET_RESUMES = UUID("0c6f2a51-8e3d-4b7a-9f15-2d4e6a8b0c13")
"""Namespace of a budget's resume ids: one per pause it lifts, in every replica."""


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
    as_of: datetime
    """The instant the figures stand at: burn, projections and run-out are from it."""
    limit_tokens: int | None
    limit_usd: float | None
    """On what the spend is billed (a subscription's calls are billed nothing)."""
    used_tokens: int
    used_usd: float | None
    """Billed; None: some of the window's spend is on a model without a price."""
    reserved_tokens: int
    calls: int
    burn_tokens_per_hour: float
    burn_usd_per_hour: float | None
    projected_tokens: int = 0
    """The window's spend at its end at the burn rate so far."""
    projected_usd: float | None = None
    limit_list_usd: float | None = None
    """On the spend's list value, however it is paid for."""
    used_list_usd: float | None = None
    """The list value of the window's spend (None: some of it has no price)."""
    projected_list_usd: float | None = None
    burn_list_usd_per_hour: float | None = None
    alert_at: tuple[float, ...] = ()
    paused_levels: tuple[str, ...] = ()
    """Levels a budget paused that this one, at its limit, still holds paused."""
    resumes_at: datetime | None = None
    """When they resume by themselves: the end of the last window holding them (a reload
    that raises or removes the limits resumes them sooner)."""

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
        """Billed USD left after spend (None: no USD limit, or spend without a price)."""
        return _left(self.limit_usd, self.used_usd)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def remaining_list_usd(self) -> float | None:
        """List value left after spend (None: no such limit, or spend without a price)."""
        return _left(self.limit_list_usd, self.used_list_usd)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def used_fraction(self) -> float:
        """The largest of tokens and USD used, as a fraction of its limit (1.0: unpriced USD)."""
        return self._fraction(self.used_tokens, self.used_usd, self.used_list_usd)

    def holds(self, billing: Billing) -> bool:
        """Whether the window at its limit holds a level paid for by `billing`.

        A subscription adds nothing billed: its levels are held by tokens and list value.
        """
        used = (self.used_tokens, self.used_usd, self.used_list_usd)
        return self._fraction(*used, billing) >= 1.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def runs_out_at(self) -> datetime | None:
        """At the burn rate so far, when the limit is reached (None: not within this window)."""
        return self.reaches_at(1.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def projected_fraction(self) -> float:
        """`used_fraction` at the window's end at the burn rate so far."""
        return self._fraction(self.projected_tokens, self.projected_usd, self.projected_list_usd)

    def _fraction(
        self, tokens: int, usd: float | None, list_usd: float | None, billing: Billing = "api"
    ) -> float:
        fractions = [0.0]
        if self.limit_tokens is not None:
            fractions.append(tokens / self.limit_tokens)
        billed = self.limit_usd if billing == "api" else None
        for limit, used in ((billed, usd), (self.limit_list_usd, list_usd)):
            if limit is not None:
                fractions.append(1.0 if used is None else used / limit)
        return max(fractions)

    def reaches_at(self, threshold: float) -> datetime | None:
        """When the window passes `threshold` at the burn rate so far (None: not in it)."""
        hours: list[float] = []
        if self.limit_tokens is not None and self.burn_tokens_per_hour > 0:
            left = threshold * self.limit_tokens - self.used_tokens
            hours.append(max(left, 0) / self.burn_tokens_per_hour)
        for limit, used, burn in (
            (self.limit_usd, self.used_usd, self.burn_usd_per_hour),
            (self.limit_list_usd, self.used_list_usd, self.burn_list_usd_per_hour),
        ):
            if limit is not None and used is not None and burn:
                hours.append(max(threshold * limit - used, 0.0) / burn)
        if not hours:
            return None
        when = self.as_of + timedelta(hours=min(hours))
        return when if when < self.window_end else None

    def limit_text(self) -> str:
        """`500,000 tokens + USD 12.5 billed + USD 40 list`, for people."""
        parts = (
            f"{self.limit_tokens:,} tokens" if self.limit_tokens else "",
            f"USD {self.limit_usd:g} billed" if self.limit_usd else "",
            f"USD {self.limit_list_usd:g} list" if self.limit_list_usd else "",
        )
        return " + ".join(part for part in parts if part)

    def remaining_text(self) -> str:
        """Tokens and USD (billed, list value) left, as far as the budget has each limit."""
        parts = (
            f"{self.remaining_tokens:,}" if self.remaining_tokens is not None else "",
            format_usd(self.remaining_usd) if self.limit_usd else "",
            format_usd(self.remaining_list_usd) if self.limit_list_usd else "",
        )
        return " / ".join(part for part in parts if part)


def _left(limit: float | None, used: float | None) -> float | None:
    """USD left of a limit (None: no such limit, or spend without a price)."""
    return None if limit is None or used is None else limit - used


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
        left = max((window.end - at).total_seconds() / 3600, 0.0)
        burn = used.tokens / hours
        burn_usd = None if used.usd is None else used.usd / hours
        burn_list = None if used.list_usd is None else used.list_usd / hours
        grown = 1 + left / hours
        statuses.append(
            BudgetStatus(
                name=rule.name,
                scope=rule.scope,
                window=rule.window,
                action=rule.action,
                window_start=window.start,
                window_end=window.end,
                as_of=at,
                limit_tokens=rule.tokens,
                limit_usd=rule.usd,
                used_tokens=used.tokens,
                used_usd=used.usd,
                reserved_tokens=held_by(rule, held),
                calls=used.calls,
                burn_tokens_per_hour=burn,
                burn_usd_per_hour=burn_usd,
                projected_tokens=round(used.tokens * grown),
                projected_usd=None if used.usd is None else used.usd * grown,
                alert_at=rule.alert_at,
                limit_list_usd=rule.list_usd,
                used_list_usd=used.list_usd,
                projected_list_usd=None if used.list_usd is None else used.list_usd * grown,
                burn_list_usd_per_hour=burn_list,
            )
        )
    return _with_pauses(budgets, statuses)


def _paired(
    budgets: Budgets, statuses: Iterable[BudgetStatus]
) -> Iterator[tuple[BudgetRule, BudgetStatus]]:
    """Each status with its budget's rule, matched by name; a status whose budget left is not.

    The rules follow a reload by themselves (`Budgets.rules`), so the rules read here
    may be newer than the ones the statuses were computed from.
    """
    rules = {rule.name: rule for rule in budgets.rules}
    for status in statuses:
        rule = rules.get(status.name)
        if rule is not None:
            yield rule, status


def held_paused(budgets: Budgets, statuses: Sequence[BudgetStatus]) -> dict[str, datetime]:
    """Level -> when the `pause` budgets at their limit that hold it all have a new window.

    A level paused by a budget stays paused while it is in here, and resumes by itself
    once it is not (`BudgetWatch`).
    """
    levels = budgets.settings.levels
    ends: dict[str, datetime] = {}
    for rule, status in _paired(budgets, statuses):
        if rule.action != "pause" or status.used_fraction < 1.0:
            continue
        for level in levels if rule.levels is None else rule.levels & levels.keys():
            if status.holds(budgets.billing(level)):
                ends[level] = max(ends.get(level, status.window_end), status.window_end)
    return ends


def budget_paused(budgets: Budgets) -> set[str]:
    """Levels whose pause in force a budget decided."""
    in_force = pauses(budgets.store, budgets.settings.levels)
    return {level for level, pause in in_force.items() if pause.by == BUDGET_ACTOR}


def _with_pauses(budgets: Budgets, statuses: list[BudgetStatus]) -> list[BudgetStatus]:
    """Each `pause` budget at its limit with the levels it holds paused and when they resume.

    The level streams are read only when such a budget exists.
    """
    ends = held_paused(budgets, statuses)
    if not ends:
        return statuses
    paused = budget_paused(budgets)
    shown = []
    for rule, status in _paired(budgets, statuses):
        held = sorted(
            level
            for level in paused & ends.keys()
            if rule.action == "pause" and rule.covers_level(level)
        )
        if held and status.used_fraction >= 1.0:
            status = status.model_copy(
                update={
                    "paused_levels": tuple(held),
                    "resumes_at": max(ends[level] for level in held),
                }
            )
        shown.append(status)
    return shown


def _warns(status: BudgetStatus, threshold: float) -> bool:
    """Whether the window, past its warm-up, will pass `threshold` before it ends."""
    length = status.window_end - status.window_start
    warm = status.as_of - status.window_start >= length * WARM_UP
    return warm and status.reaches_at(threshold) is not None


@dataclass
class BudgetWatch:
    """Records budget crossings and pauses `pause` budgets' levels; a companion of `run`.

    The service's log tells each crossing and pause from the events (`log_feed`), in
    every replica, whichever recorded them.
    """

    settings: Settings
    store: EventStore
    budgets: Budgets
    recorded: set[tuple[str, str, str, float]] | None = None

    def run(self, stopping: threading.Event) -> None:
        """Poll until `stopping` is set; a store outage is waited out."""
        while not stopping.is_set():
            try:
                self.poll()
            except StoreError as exc:
                log.warning("budgets: store unavailable, trying again: %s", exc)
            stopping.wait(POLL_SECONDS)

    def poll(self, at: datetime | None = None) -> list[BudgetThreshold]:
        """Record the crossings and warnings not recorded yet; returns those this poll did.

        Then lift the pauses of levels no `pause` budget at its limit holds any more.
        """
        recorded = self.recorded = self.recorded if self.recorded is not None else set()
        new: list[BudgetThreshold] = []
        statuses = budget_statuses(self.budgets, at)
        for status in statuses:
            start = status.window_start.isoformat()
            for threshold in (*status.alert_at, 1.0):
                if status.used_fraction >= threshold:
                    kind: type[BudgetThreshold] = BudgetCrossed
                elif _warns(status, threshold):
                    kind = BudgetProjected
                else:
                    continue
                key = (kind.type, status.name, start, threshold)
                if key in recorded:
                    continue
                event = self._record(status, kind, threshold)
                recorded.add(key)
                if event is not None:
                    new.append(event)
        self.resume(statuses)
        return new

    def resume(self, statuses: Sequence[BudgetStatus]) -> list[str]:
        """Resume the levels a budget paused that no `pause` budget at its limit holds.

        Returns the levels resumed. One resume per pause whichever replicas see it: its
        event id follows from the pause's, and an id already stored is not appended again.
        """
        held = held_paused(self.budgets, statuses)
        in_force = pauses(self.store, self.settings.levels)
        resumed = []
        for level, pause in sorted(in_force.items()):
            if pause.by != BUDGET_ACTOR or level in held:
                continue
            event = LevelResumed(
                event_id=uuid5(BUDGET_RESUMES, str(pause.event_id)),
                level=level,
                by=BUDGET_ACTOR,
                reason=self._why(level, statuses),
            )
            self.store.append(level_stream(level), [event.to_record()])
            resumed.append(level)
        return resumed

    def _why(self, level: str, statuses: Sequence[BudgetStatus]) -> str:
        """Why a level's budget pause lifts: told by its budgets' crossings, not by clocks.

        A `pause` budget that crossed its limit in its current window and has room again
        had its limit raised (or spend left its rolling window); with no crossing in the
        current window, the window that paused the level has rolled over.
        """
        covering = [
            (rule, status)
            for rule, status in _paired(self.budgets, statuses)
            if rule.action == "pause" and rule.covers_level(level)
        ]
        if not covering:
            return "no pause budget holds it any more"
        for rule, status in covering:
            crossed = BudgetCrossed.id_for(rule.name, status.window_start.isoformat(), 1.0)
            if any(e.event_id == crossed for e in self.store.read_stream(budget_stream(rule.name))):
                return (
                    f"budget {rule.name} has room again in this window (a reload raised "
                    "its limit, or spend left its rolling window)"
                )
        return "its budget's window rolled over"

    def _record(
        self, status: BudgetStatus, kind: type[BudgetThreshold], threshold: float
    ) -> BudgetThreshold | None:
        """Record the crossing or warning unless stored already.

        A `pause` budget's limit pauses its levels first, and the crossing names them.
        """
        start = status.window_start.isoformat()
        event_id = kind.id_for(status.name, start, threshold)
        history = self.store.read_stream(budget_stream(status.name))
        if any(stored.event_id == event_id for stored in history):
            return None
        fields = {
            "event_id": event_id,
            "budget": status.name,
            "scope": status.scope,
            "window_start": start,
            "window_end": status.window_end.isoformat(),
            "threshold": threshold,
            "action": status.action,
            "used_tokens": status.used_tokens,
            "used_usd": status.used_usd,
            "limit_tokens": status.limit_tokens,
            "limit_usd": status.limit_usd,
        }
        if kind is BudgetProjected:
            fields |= {
                "projected_tokens": status.projected_tokens,
                "projected_usd": status.projected_usd,
                "reaches_at": status.reaches_at(threshold),
            }
        elif threshold >= 1.0 and status.action == "pause":
            fields["levels"] = self._pause(status)
        event = kind.model_validate(fields)
        self.store.append(event.stream_id, [event.to_record()])
        return event

    def _pause(self, status: BudgetStatus) -> list[str]:
        """Pause the levels the budget holds that are not paused already.

        Nothing is paused when a reload took the budget away since its status was read.
        """
        rule = next((rule for rule, _ in _paired(self.budgets, [status])), None)
        if rule is None:
            return []
        paused = []
        for level in self._levels_of(rule):
            if not status.holds(self.budgets.billing(level)):
                continue  # a subscription's level, held by the bill alone: it adds nothing
            if level_paused(self.store, level):
                continue
            reason = (
                f"budget {status.name} ({status.scope}, {status.window}) spent: "
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
