"""Read models folded from the event log, each with its own queries; rebuilt from zero.

It owns the fold loop (`Projector`, one checkpoint per read model, kept by the store;
a large backlog of a read model of sums, `SumProjection`, folded on every core) and
each read model: spend per day and model, ticks with their status, each model's
learned calibration, counters of ticks per level, each level's failure streak (folded
by the alerter), the cancel scopes in force, each digest's last publication, and which
levels are paused (a query on the level streams); beside them, a provider's bill read
from its export and reconciled with the spend read model (`bills`, `reconciliation`). Every
other stage reads a read model through the queries exported here, never its tables.
Every name is loaded on first use (`harness.fronts`): a command pays only for the read
models it asks.
"""

from __future__ import annotations

import typing

from harness import fronts

if typing.TYPE_CHECKING:
    from harness.projections.base import EventData, Projection, SumProjection
    from harness.projections.bills import Bill, BillError, read_bill
    from harness.projections.budget_windows import (
        BUDGET_WINDOWS,
        WindowSpend,
        budget_projector,
        ensure_folded,
        spent_in_windows,
    )
    from harness.projections.calibration import (
        CalibrationProjection,
        SharedCalibrations,
        current_calibrations,
        load_calibrations,
    )
    from harness.projections.call_spend import (
        SPEND_COLUMNS,
        CallCost,
        TickSpend,
        ToolInput,
        spend_per_call,
        usd_words,
    )
    from harness.projections.calls import CallCounts, calls_said, count_calls, counted
    from harness.projections.digests import DigestsProjection, latest_published
    from harness.projections.leaving import delete_archived, drop_archived_day
    from harness.projections.level_stats import LevelStats, mean_run_seconds, stats_of_levels
    from harness.projections.levels import (
        CancelScopesProjection,
        cancel_scopes,
        level_paused,
        paused_levels,
        pauses,
    )
    from harness.projections.moment import TickNow, tick_now
    from harness.projections.periods import PeriodSpend, period_of
    from harness.projections.projector import Progress, Projector
    from harness.projections.reconciliation import (
        Reconciliation,
        last_reconciliations,
        reconcile,
    )
    from harness.projections.registry import projector_for
    from harness.projections.spend import (
        REPORT_DAYS,
        REPORT_GROUPS,
        GroupBy,
        ReportGroup,
        SpendProjection,
        SpendRow,
        report_since,
        spend_by,
        spend_report,
        top_spenders,
    )
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
    from harness.projections.tick_lines import tick_line
    from harness.projections.tick_spend import TickCost, tick_costs_since
    from harness.projections.ticks import (
        OPEN,
        STATUSES,
        UNKNOWN,
        TickCursor,
        TickInFlight,
        TickMark,
        TickPage,
        TickRow,
        TicksProjection,
        fire_lags,
        last_slots,
        last_statuses,
        latest_ticks,
        open_ticks,
        previous_result_path,
        recent_ticks,
        runs_of,
        tick_ids_starting,
        tick_page,
        tick_statuses,
        ticks_in_flight,
    )

__getattr__, __all__ = fronts.declared(__name__)
