"""Scheduling: when slots fire and which of them become ticks.

It owns the triggers and the one timetable loop (levels and digests), the decision on
each slot of a wave (run, buffer or skip: overlap, budget, paused, missed) and its claim
in the store, the daily budgets, the operator's controls (pause, resume, cancel), the
reconciliation of ticks whose owner vanished, the status snapshot, riding out a store
outage (and claiming the slots it left owed), the alerts, and the service that wires
them. Claimed ticks go to an executor through `Handoff`; scheduling never imports
`harness.execution`, which comes after it.
"""

from __future__ import annotations

from harness.scheduling.control import (
    Switched,
    UnknownLevelError,
    operator,
    request_cancel,
    switch_level,
)
from harness.scheduling.handoff import Handoff, RunningTick, ScopeMatch
from harness.scheduling.reconcile import reconcile
from harness.scheduling.service import Companion, Service
from harness.scheduling.status import LevelStatus, Snapshot, refresh, snapshot
from harness.scheduling.timetable import Slot, Timetable
from harness.scheduling.triggers import level_trigger, next_slot, slot_tick_id
from harness.scheduling.waves import SkipReason, SlotClaim, claim_wave

__all__ = [
    "Companion",
    "Handoff",
    "LevelStatus",
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
    "claim_wave",
    "level_trigger",
    "next_slot",
    "operator",
    "reconcile",
    "refresh",
    "request_cancel",
    "slot_tick_id",
    "snapshot",
    "switch_level",
]
