"""`/spend` and `/budgets`: what the ticks spent, and each budget's window."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from harness.api.routes.requests import FreshReads, Since
from harness.projections import ReportGroup, SpendRow
from harness.scheduling import BudgetStatus

router = APIRouter(tags=["spend"])

SpendGroups = Annotated[
    list[ReportGroup] | None,
    Query(
        description="level, model, day, template (the prompt's version) and/or tag (the "
        "levels' `tags`; a level with two counts in both)."
    ),
]


@router.get("/spend")
def spend(
    reads: FreshReads,
    by: SpendGroups = None,
    since: Annotated[Since | None, Query(description="7d or an ISO date (UTC days).")] = None,
) -> list[SpendRow]:
    """Tokens and cost grouped by level, model, UTC day and/or prompt template.

    Cost None: unpriced. A template is the hash of a level's prompt before
    substitution ("" for spend recorded without one).
    """
    return reads.spend(by or ["level"], since.date() if since else None)


@router.get("/budgets")
def budgets(reads: FreshReads) -> list[BudgetStatus]:
    """Each budget's window: used, reserved, remaining, window end, burn rate, run-out."""
    return reads.budgets()
