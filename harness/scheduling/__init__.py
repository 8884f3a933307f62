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
    from harness.scheduling.backfill import (
        Backfill,
        BackfillError,
        BackfillProgress,
        Progress,
        backfill_progress,
        backfills,
        cancel_backfill,
        request_backfill,
    )
    from harness.scheduling.control import (
        Switched,
        UnknownLevelError,
        operator,
        request_cancel,
        switch_level,
    )
    from harness.scheduling.handoff import Handoff, RunningTick, ScopeMatch
    from harness.scheduling.reload import (
        LevelsReload,
        levels_revision,
        record_levels,
        recorded_levels,
    )
    from harness.scheduling.service import Companion, Service
    from harness.scheduling.status import LevelStatus, Snapshot, refresh, snapshot
    from harness.scheduling.timetable import Slot, Timetable
    from harness.scheduling.waves import SkipReason, SlotClaim, claim_wave

__all__ = [
    "Backfill",
    "BackfillError",
    "BackfillProgress",
    "Companion",
    "Handoff",
    "LevelStatus",
    "LevelsReload",
    "Progress",
    "RunningTick",
    "ScopeMatch",
    "Service",
    "SkipReason",
    "Slot",
    "SlotClaim",
    "Snapshot",
    "Switched",
    "Timetable",
    "UnknownLevelError",
    "backfill_progress",
    "backfills",
    "cancel_backfill",
    "claim_wave",
    "level_trigger",
    "levels_revision",
    "next_slot",
    "operator",
    "record_levels",
    "recorded_levels",
    "refresh",
    "request_backfill",
    "request_cancel",
    "slot_tick_id",
    "snapshot",
    "switch_level",
]

_HOMES = {
    "backfill": (
        "Backfill",
        "BackfillError",
        "BackfillProgress",
        "Progress",
        "backfill_progress",
        "backfills",
        "cancel_backfill",
        "request_backfill",
    ),
    "control": ("Switched", "UnknownLevelError", "operator", "request_cancel", "switch_level"),
    "handoff": ("Handoff", "RunningTick", "ScopeMatch"),
    "reload": ("LevelsReload", "levels_revision", "record_levels", "recorded_levels"),
    "service": ("Companion", "Service"),
    "status": ("LevelStatus", "Snapshot", "refresh", "snapshot"),
    "timetable": ("Slot", "Timetable"),
    "waves": ("SkipReason", "SlotClaim", "claim_wave"),
}
__getattr__ = fronts.names_on_first_use(__name__, _HOMES)
