"""`/spend` and `/budgets`: what the ticks spent, and each budget's window."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Response

from harness.api.routes.requests import FreshReads, Since
from harness.projections import REPORT_DAYS, ReportGroup, SpendRow, report_since
from harness.scheduling import BudgetStatus

router = APIRouter(tags=["spend"])

SpendGroups = Annotated[
    list[ReportGroup] | None,
    Query(
        description="level, model, day, template (the prompt's version) and/or tag (the "
        "levels' `tags`; a level with two counts in both)."
    ),
]


SINCE_HEADER = {
    "X-Spend-Since": {
        "description": "The report's first UTC day (ISO date): `since`'s, or the default's.",
        "schema": {"type": "string", "format": "date"},
    }
}


@router.get("/spend", responses={200: {"headers": SINCE_HEADER}})
def spend(
    reads: FreshReads,
    response: Response,
    by: SpendGroups = None,
    since: Annotated[
        Since | None,
        Query(
            description=f"7d or an ISO date (UTC days); the last {REPORT_DAYS} days if not "
            "given (an early date for all of it)."
        ),
    ] = None,
) -> list[SpendRow]:
    """Tokens, list value and billed USD grouped by level, model, UTC day and/or template.

    `cost_usd` is the calls' list value, `billed_usd` what they were billed (0 for calls
    on a subscription); None: unpriced. A template is the hash of a level's prompt before
    substitution ("" for spend recorded without one). Of the last REPORT_DAYS days
    unless `since` says otherwise: the read model keeps every day.
    """
    first = report_since(since.date() if since else None, datetime.now(UTC).date())
    response.headers["X-Spend-Since"] = first.isoformat()
    return reads.spend(by or ["level"], first)


@router.get("/budgets")
def budgets(reads: FreshReads) -> list[BudgetStatus]:
    """Each budget's window: used, reserved, remaining, window end, burn rate, run-out."""
    return reads.budgets()
