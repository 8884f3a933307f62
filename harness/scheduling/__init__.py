"""Scheduling: when slots fire and which of them become ticks.

It owns the triggers and the one timetable loop (levels and digests), the decision on
each slot of a wave (run, buffer or skip: overlap, budget, paused, missed) and its claim
in the store, the overlap buffer, backfills of past ranges, the daily budgets, the
operator's controls (pause, resume, cancel), the
reconciliation of ticks whose owner vanished, the status snapshot, riding out a store
outage (and claiming the slots it left owed), the alerts, live edits of the levels
(`reload`), and the service that wires them. Claimed ticks go to an executor through
`Handoff`; scheduling never imports `harness.execution`, which comes after it.

All but the triggers are loaded on first use (`harness.fronts`): importing any submodule
runs this front first, and `tickwork status` needs the status snapshot without the
service, the reconciler (psutil) or the wave claims (routing). `reconcile` is not a name of
the front: it is its submodule's name too, and a loaded submodule would shadow the function.
"""

from __future__ import annotations

import typing

from harness import fronts
from harness.scheduling.triggers import level_trigger, next_slot, slot_tick_id

if typing.TYPE_CHECKING:
    from harness.scheduling.alerts import Alerter
    from harness.scheduling.archiving import Archiver
    from harness.scheduling.backfill import (
        Backfill,
        BackfillError,
        BackfillProgress,
        BackfillRefused,
        Progress,
        backfill_progress,
        backfills,
        cancel_backfill,
        forecast_backfill,
        request_backfill,
    )
    from harness.scheduling.budget import Budgets, reservations_in_flight
    from harness.scheduling.budget_watch import BudgetStatus, BudgetWatch, budget_statuses
    from harness.scheduling.capacity import Capacity, slots_a_minute
    from harness.scheduling.compaction import Compactor
    from harness.scheduling.control import (
        PAUSED,
        ControlFollower,
        ScopeError,
        Switched,
        UnknownLevelError,
        cancel,
        clear_cancel,
        operator,
        request_cancel,
        switch_level,
    )
    from harness.scheduling.describe import LevelDescription, describe_levels
    from harness.scheduling.forecast import Crossing, RunForecast, TickForecast
    from harness.scheduling.handoff import Handoff, RunningTick, ScopeMatch
    from harness.scheduling.manual import manual_ticks_ahead
    from harness.scheduling.outage import Outage
    from harness.scheduling.reload import (
        LevelsReload,
        ServeReload,
        last_reload,
        levels_revision,
        record_levels,
        recorded_levels,
        reload_lines,
    )
    from harness.scheduling.service import Companion, Service
    from harness.scheduling.status import LevelStatus, Snapshot, projection_lag, refresh, snapshot
    from harness.scheduling.timetable import POLL_SECONDS, Slot, Timetable
    from harness.scheduling.transcript_archiving import TranscriptsArchived
    from harness.scheduling.transitions import Transition
    from harness.scheduling.waves import Manual, SkipReason, SlotClaim, claim_wave

__getattr__, __all__ = fronts.declared(__name__)
