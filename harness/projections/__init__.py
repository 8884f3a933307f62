"""Read models folded from the event log, each with its own queries; rebuilt from zero.

It owns the fold loop (`Projector`, one checkpoint per read model, kept by the store;
a large backlog of a read model of sums, `SumProjection`, folded on every core) and
each read model: spend per day and model, ticks with their status, each model's
learned calibration, counters of ticks per level, each level's failure streak (folded
by the alerter), the cancel scopes in force, each digest's last publication, and which
levels are paused (a query on the level streams). Every
other stage reads a read model through the queries exported here, never its tables.
"""

from __future__ import annotations

from harness.projections.base import EventData, Projection, SumProjection
from harness.projections.calibration import (
    CalibrationProjection,
    current_calibrations,
    load_calibrations,
)
from harness.projections.digests import DigestsProjection, latest_published
from harness.projections.levels import CancelScopesProjection, level_paused, paused_levels
from harness.projections.projector import Progress, Projector
from harness.projections.registry import projector_for
from harness.projections.spend import GroupBy, SpendProjection, SpendRow, spend_report
from harness.projections.story import StoryStep, TickStory, story_of, story_steps, tick_story
from harness.projections.streaks import Streak, fold_streak, load_streaks, save_streaks
from harness.projections.tick_counts import (
    DURATION_BUCKETS,
    Durations,
    TickCounters,
    durations,
    status_counts,
    tick_counters,
    tool_cap_counts,
)
from harness.projections.ticks import (
    STATUSES,
    UNKNOWN,
    TickInFlight,
    TickMark,
    TickPage,
    TickRow,
    TicksProjection,
    fire_lags,
    last_slots,
    last_statuses,
    open_ticks,
    previous_result_path,
    recent_ticks,
    tick_ids_starting,
    tick_page,
    tick_statuses,
    ticks_in_flight,
)

__all__ = [
    "DURATION_BUCKETS",
    "STATUSES",
    "UNKNOWN",
    "CalibrationProjection",
    "CancelScopesProjection",
    "DigestsProjection",
    "Durations",
    "EventData",
    "GroupBy",
    "Progress",
    "Projection",
    "Projector",
    "SpendProjection",
    "SpendRow",
    "StoryStep",
    "Streak",
    "SumProjection",
    "TickCounters",
    "TickInFlight",
    "TickMark",
    "TickPage",
    "TickRow",
    "TickStory",
    "TicksProjection",
    "current_calibrations",
    "durations",
    "fire_lags",
    "fold_streak",
    "last_slots",
    "last_statuses",
    "latest_published",
    "level_paused",
    "load_calibrations",
    "load_streaks",
    "open_ticks",
    "paused_levels",
    "previous_result_path",
    "projector_for",
    "recent_ticks",
    "save_streaks",
    "spend_report",
    "status_counts",
    "story_of",
    "story_steps",
    "tick_counters",
    "tick_ids_starting",
    "tick_page",
    "tick_statuses",
    "tick_story",
    "ticks_in_flight",
    "tool_cap_counts",
]
