"""What each slot of a wave becomes, and the one transaction that claims the wave.

A due slot runs, is buffered (held until the level's ticks in flight end: `overlap =
"buffer_one"`, `"buffer_all"`, `"cancel_other"`), or is skipped: `missed` (no scheduler
ran), `paused`, `overlap` or `budget`. Under `cancel_other` and `terminate_other` the
claim also asks for the level's ticks in flight to be cancelled. A slot's tick id is the
same in every replica, so creating its tick stream is the claim: of two replicas on one
store exactly one claims each slot, and a slot decided skipped is claimed and ended in
the same write.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal
from uuid import UUID

from harness.config import LevelConfig, Settings
from harness.contracts import (
    TickBuffered,
    TickEvent,
    TickScheduled,
    TickSkipped,
    new_event_id,
    tick_stream,
)
from harness.routing import Routed, catalog_record, decision_fields
from harness.scheduling.budget import BudgetCheck
from harness.scheduling.timetable import Slot
from harness.store import EventStore

SkipReason = Literal["overlap", "budget", "missed", "paused", "budget_forecast"]
Decision = SkipReason | Literal["run", "buffer"]
SKIPPED = {
    "missed": "missed: nothing could claim it when it fell due",
    "budget_forecast": "missed, and {level}'s budgets cannot pay for it by the forecast",
    "paused": "{level} is paused (tickwork resume {level})",
}
"""What the log says of a slot skipped for a reason; a budget's skip names the budget and
its numbers instead (`BudgetCheck.words`), an overlap's the tick that held its slot and
why it still does (`harness.scheduling.capacity.SlotHolders`)."""


@dataclass(frozen=True)
class Manual:
    """What a person asked of a tick they started (`tickwork tick`) instead of a slot."""

    prompt: str | None = None
    """Instead of the level's prompt."""
    timeout: float | None = None
    """Instead of the level's timeout."""
    forced: bool = False
    """Run through the level's pause and budget (cancel scopes still stop it)."""


@dataclass(frozen=True)
class SlotClaim:
    """A slot's tick as a scheduler claims it: no payload yet.

    The payload (and its prompt, which may quote the level's previous result) is built
    when the tick gets a place to run, not when its slot fires: a queued tick must not
    start with a result that was stale while it waited.
    """

    tick_id: str
    level: str
    slot: datetime | None
    skip: SkipReason | None = None
    """Claimed and ended at once, without running."""
    reserved_tokens: int = 0
    """Held against the level's daily budget while the tick is in flight."""
    routed: Routed | None = None
    """The catalog's decision for the slot, recorded in TickScheduled and run as decided."""
    manual: Manual | None = None
    """Started by hand: runs in the executor's manual lane, recorded as such."""
    config: LevelConfig | None = field(default=None, compare=False)
    """The level's settings when its slot was claimed: the tick runs with them even when
    a reload changes the level before it starts (None: those in force when it starts)."""
    config_revision: str | None = None
    """The levels' revision `config` belongs to, recorded in TickScheduled."""
    buffered: tuple[str, ...] | None = None
    """Held by an overlap policy behind these ticks in flight (TickBuffered)."""
    policy: str | None = None
    """The overlap policy that decided the slot (recorded in TickBuffered)."""
    backfill: str | None = None
    """The backfill that claims the slot, recorded in TickScheduled."""
    claim_id: UUID = field(default_factory=new_event_id, compare=False)
    """The event id of its TickScheduled: a claim whose commit was cut off by a store
    outage is known for this replica's own when the store answers again."""
    fire_at: datetime | None = None
    """When the slot fired: its time plus the level's jitter (None: no jitter, or no slot)."""
    held: str | None = None
    """An `overlap` skip's holder, as the log says it (`capacity.SlotHolders`)."""

    def scheduled(self, level_model: str | None) -> TickScheduled:
        """The claim's TickScheduled; the model is the first candidate's, if routed."""
        first = self.routed.plan.candidates[0] if self.routed else None
        return TickScheduled(
            event_id=self.claim_id,
            tick_id=self.tick_id,
            level=self.level,
            model=first.model if first else level_model,
            slot=self.slot,
            fire_at=self.fire_at if self.fire_at != self.slot else None,
            reserved_tokens=self.reserved_tokens,
            host=socket.gethostname(),
            scheduler_pid=os.getpid(),
            manual=self.manual is not None,
            forced=self.manual is not None and self.manual.forced,
            config_revision=self.config_revision,
            backfill=self.backfill,
            **(decision_fields(self.routed) if self.routed else {}),
        )


def decide(
    level: str,
    config: LevelConfig,
    paused: set[str],
    busy: set[str],
    holding: Callable[[str], bool],
    reserve: Callable[[], BudgetCheck],
    over_budget: dict[str, BudgetCheck],
) -> Decision:
    """What a due slot becomes; `busy` gains the level when its tick will run.

    `holding` (a tick of the level is buffered already) and `reserve` (the tick's budget
    reservation) are asked only when the decision depends on them: a reservation is made
    only for a tick that will run.
    """
    if level in paused:
        return "paused"
    decision: Decision = "run"
    if level in busy and config.overlap not in ("allow", "terminate_other"):
        if config.overlap == "skip" or (config.overlap == "buffer_one" and holding(level)):
            return "overlap"
        decision = "buffer"
    budget = reserve()
    if not budget.allowed:
        over_budget.setdefault(level, budget)
        return "budget"
    busy.add(level)
    return decision


def missed_slots(
    settings: Settings,
    slots: Collection[Slot],
    now: datetime,
    fire_at: Callable[[str, datetime], datetime] = lambda level, slot: slot,
) -> set[Slot]:
    """The catch-up policy: which of `slots`, due unclaimed, are recorded skipped `missed`.

    All of them but each level's latest, and that one too unless it fell due (at its
    jittered fire time, `fire_at`) within the level's `catch_up_seconds` of `now`: a
    scheduler that was down, a store that was out and a wave that was held up all leave
    slots to account for, and all account alike.
    """
    latest: dict[str, datetime] = {}
    for slot, level in slots:
        latest[level] = max(slot, latest.get(level, slot))
    return {
        (slot, level)
        for slot, level in slots
        if slot != latest[level]
        or now - fire_at(level, slot) > timedelta(seconds=settings.levels[level].catch_up_seconds)
    }


DISPLACING = frozenset({"cancel_other", "terminate_other"})
"""Overlap policies under which a new slot's tick cancels the level's ticks in flight."""


def skip_reason(decision: Decision) -> SkipReason | None:
    """The reason a skipped slot records, or None for a slot that runs (now or buffered)."""
    if decision == "run" or decision == "buffer":
        return None
    return decision


def claim_wave(store: EventStore, settings: Settings, wave: Sequence[SlotClaim]) -> set[str]:
    """Claim many slots in one transaction; returns the tick ids claimed here.

    A slot already decided skipped is claimed and ended in the same write, and the
    catalog a decision names is stored in it too (its stream is created once).
    """
    streams = {}
    for claim in wave:
        if claim.routed is not None:
            recorded = catalog_record(claim.routed.catalog)
            streams[recorded.stream_id] = [recorded.to_record()]
        config = claim.config or settings.levels.get(claim.level)
        events: list[TickEvent] = [claim.scheduled(config.model if config else None)]
        if claim.buffered is not None:
            events.append(
                TickBuffered(
                    tick_id=claim.tick_id,
                    level=claim.level,
                    slot=claim.slot,
                    policy=claim.policy or (config.overlap if config else "buffer_one"),
                    behind=list(claim.buffered),
                )
            )
        if claim.skip is not None:
            events.append(
                TickSkipped(
                    tick_id=claim.tick_id,
                    level=claim.level,
                    reason=claim.skip,
                    slot=claim.slot,
                    held=claim.held,
                )
            )
        streams[tick_stream(claim.tick_id)] = [event.to_record() for event in events]
    created = store.create_streams(streams)
    return {claim.tick_id for claim in wave if tick_stream(claim.tick_id) in created}
