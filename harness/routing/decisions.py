"""Routing decisions from the catalog: which targets a level's tick runs on, and in what order.

A decision depends only on the catalog, the level and an instant (a slot, or now), so the
same slot routes the same way in every replica and `tickwork catalog route --at` shows
exactly what a tick at that instant would record. Time windows are read on the wall
clock of the catalog's zone, so `[07:00, 23:00)` stays 07:00 local across DST changes.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from harness.config import Settings, one_line
from harness.contracts import (
    RouteCandidate,
    RoutePlan,
    RoutePromoted,
    TickFailed,
    TickPayload,
    TickResult,
)
from harness.routing.catalog import (
    MINUTES_A_DAY,
    Catalog,
    CatalogError,
    Window,
    load_catalog,
    minutes,
)

Report = Callable[[str], None]
WATCH_SECONDS = 1.0


class NaiveTimeError(ValueError):
    """A decision instant without a zone would route differently on every host."""


@dataclass(frozen=True)
class Decision:
    """What a tick records about why it runs where it runs."""

    level: str
    route_id: str
    rule_id: str
    policy_priority: int
    reason_codes: tuple[str, ...]
    window: str | None
    candidates: tuple[str, ...]
    revision: str
    at: datetime


def _inside(window: Window, minute: int) -> bool:
    start, end = minutes(window.start), minutes(window.end)
    return (minute - start) % MINUTES_A_DAY < ((end - start) % MINUTES_A_DAY or MINUTES_A_DAY)


def decide(catalog: Catalog, level: str, at: datetime) -> Decision | None:
    """The decision for a tick of `level` at `at`, or None when no lane names the level."""
    if at.tzinfo is None or at.utcoffset() is None:
        raise NaiveTimeError(f"{at.isoformat()} has no time zone: give an offset such as +00:00")
    if level not in catalog.lanes:
        return None
    local = at.astimezone(catalog.zone)
    minute = local.hour * 60 + local.minute
    window, rule = next(
        (name, rule)
        for name, rule in catalog.rules(level)
        if name is None or (isinstance(rule, Window) and _inside(rule, minute))
    )
    revision = catalog.revision
    return Decision(
        level=level,
        route_id=f"{level}/{window or 'always'}@{revision[:12]}",
        rule_id=rule.rule_id,
        policy_priority=catalog.lanes[level].policy_priority,
        reason_codes=tuple(rule.reason_codes),
        window=window,
        candidates=tuple(rule.candidates),
        revision=revision,
        at=at,
    )


def candidate(catalog: Catalog, target_id: str) -> RouteCandidate:
    """The target as a tick's payload carries it: endpoint by value, key by environment name."""
    target = catalog.targets[target_id]
    return RouteCandidate(
        target=target_id,
        model=target.model,
        api=target.api,
        agent=target.agent,
        effort=target.effort,
        base_url=target.base_url,
        base_url_env=target.base_url_env,
        api_key_env=target.api_key_env,
        quota_probe=target.quota_probe,
        selfcheck_required=target.selfcheck_required,
    )


@dataclass(frozen=True)
class Routed:
    """A decision with the catalog it came from (its promotions hold for the whole tick)."""

    decision: Decision
    plan: RoutePlan
    catalog: Catalog

    def promotion(self, target_id: str) -> RouteCandidate | None:
        """The stronger target to try after this one failed on content, if the catalog names one."""
        stronger = self.catalog.promotions.get(target_id)
        return None if stronger is None else candidate(self.catalog, stronger)

    def with_promotions(self) -> list[RouteCandidate]:
        """The route's candidates, then every target a content failure may promote them to."""
        targets = self.catalog.with_promotions(c.target for c in self.plan.candidates)
        return [candidate(self.catalog, target) for target in targets]


def decision_fields(routed: Routed) -> dict[str, Any]:
    """The decision as `TickScheduled` records it."""
    decision = routed.decision
    return {
        "route_id": decision.route_id,
        "rule_id": decision.rule_id,
        "policy_priority": decision.policy_priority,
        "reason_codes": list(decision.reason_codes),
        "window": decision.window,
        "candidates": list(decision.candidates),
        "catalog_revision": decision.revision,
    }


class CatalogSource:
    """The catalog in force, reloaded on request (SIGHUP) or when its file changes.

    A new file is read whole and validated before it replaces the old catalog; an invalid
    one is reported once with its errors and the old catalog stays in force. Only the
    watcher thread (or an explicit `poll`) reloads, so a signal handler never does file
    work: it only sets a flag the next poll honours.
    """

    def __init__(
        self,
        path: Path,
        report: Report = lambda line: None,
        needs_lane: frozenset[str] = frozenset(),
        budget_targets: Mapping[str, str] | None = None,
    ) -> None:
        """`needs_lane`: levels with no `model` of their own, which only a lane can route.

        `budget_targets`: the path of each `[[budgets]]` entry scoped to a target -> the
        target it names, which the catalog must have (a budget on nothing limits nothing).
        """
        self.path = path
        self.report = report
        self.needs_lane = needs_lane
        self.budget_targets = dict(budget_targets or {})
        self.catalog = self._load()
        self._seen = self._digest()
        self._requested = False

    def _load(self) -> Catalog:
        catalog = load_catalog(self.path)
        missing = sorted(self.needs_lane - set(catalog.lanes))
        problems = [
            f"levels.{level}: has no model and the catalog has no lane for it: "
            "give the level a model or the catalog a lane named after it"
            for level in missing
        ]
        problems += [
            f"{where}.scope: the catalog has no target named {target!r} "
            f"(known: {', '.join(sorted(catalog.targets))})"
            for where, target in self.budget_targets.items()
            if target not in catalog.targets
        ]
        if problems:
            raise CatalogError(str(self.path), problems)
        return catalog

    def _digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def request_reload(self) -> None:
        """Safe in a signal handler: the next poll reloads even an unchanged file."""
        self._requested = True

    def poll(self) -> None:
        """Reload if asked or if the file changed; an invalid file leaves the old one in force."""
        digest = self._digest()
        if digest == self._seen and not self._requested:
            return
        self._requested, self._seen = False, digest
        old = self.catalog.revision
        try:
            new = self._load()
        except CatalogError as exc:
            why = one_line(str(exc), exc.source)
            self.report(f"catalog {self.path} rejected ({why}): revision {old[:12]} stays in force")
            return
        self.catalog = new
        self.report(f"catalog {self.path} reloaded: revision {old[:12]} -> {new.revision[:12]}")

    def watch(self, stopping: threading.Event) -> threading.Thread:
        """Poll the catalog file on a daemon thread until `stopping` is set."""

        def loop() -> None:
            while not stopping.wait(WATCH_SECONDS):
                self.poll()

        thread = threading.Thread(target=loop, name="catalog-watch", daemon=True)
        thread.start()
        return thread


class Router:
    """Routes a runner's ticks through the catalog in force."""

    def __init__(self, source: CatalogSource, availability_ttl_seconds: float) -> None:
        self.source = source
        self.ttl = availability_ttl_seconds

    def route(self, level: str, at: datetime) -> Routed | None:
        """The decision and candidates for a tick of `level` at `at` (None: level not routed)."""
        catalog = self.source.catalog
        decision = decide(catalog, level, at)
        if decision is None:
            return None
        plan = RoutePlan(
            candidates=[candidate(catalog, target) for target in decision.candidates],
            availability_ttl_seconds=self.ttl,
        )
        return Routed(decision, plan, catalog)


def configured_router(settings: Settings, report: Report = lambda line: None) -> Router | None:
    """The router of `[routing] catalog`, or None: then each level's `model` runs, as always.

    Raises CatalogError when the configured catalog is invalid, or has no lane for a level
    without a model of its own (nothing may start then: every tick of it would fail).
    """
    if settings.routing.catalog is None:
        return None
    modelless = frozenset(name for name, level in settings.levels.items() if not level.model)
    targets = {
        f"budgets.{index}": entry.scope_name
        for index, entry in enumerate(settings.budgets)
        if entry.scope_kind == "target"
    }
    source = CatalogSource(settings.routing.catalog, report, modelless, targets)
    return Router(source, settings.routing.availability_ttl_seconds)


class Escalation:
    """The payload each attempt of a tick runs with, promoted when content retries run out.

    `first_attempt` is where the current target's attempts began: each target gets the
    level's full retries before it is promoted. A promoted attempt runs on the stronger
    target alone: it was chosen because the lane's candidates did not answer well.
    """

    def __init__(
        self, payload: TickPayload, routed: Routed | None, record: Callable[[RoutePromoted], None]
    ) -> None:
        self.payload = payload
        self.routed = routed
        self.record = record
        self.first_attempt = 1

    def promote(self, end: TickFailed, attempt: int, result: TickResult | None) -> bool:
        """After a content failure that used up the retries: move on, if the catalog says so.

        `result`: the failed attempt's result file, as the runner read it (None: unusable).
        """
        if self.routed is None or end.failure_class != "content":
            return False
        failed = self._target_of(result)
        stronger = self.routed.promotion(failed)
        if stronger is None:
            return False
        plan = self.routed.plan.model_copy(update={"candidates": [stronger]})
        self.payload = self.payload.model_copy(
            update={
                "model": stronger.model,
                "api": stronger.api,
                "effort": stronger.effort,
                "route": plan,
            }
        )
        self.first_attempt = attempt + 1
        self.record(
            RoutePromoted(
                tick_id=end.tick_id,
                level=end.level,
                from_target=failed,
                to_target=stronger.target,
                reason=end.reason,
                attempt=attempt,
            )
        )
        return True

    def _target_of(self, result: TickResult | None) -> str:
        """The target that answered (after any fallback), else the plan's first."""
        assert self.payload.route is not None
        if result is not None and result.target:
            return result.target
        return self.payload.route.candidates[0].target
