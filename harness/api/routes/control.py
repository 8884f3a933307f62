"""Operator requests over HTTP: run now, re-run, backfill, pause and resume, cancel.

Each appends what the CLI's command appends (`harness.scheduling.control`), so every
running service acts on it, whichever host it runs on.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response

from harness.api.models import (
    BackfillBody,
    BackfillForecast,
    BackfillView,
    Cancelled,
    Cleared,
    Problem,
    Started,
)
from harness.api.routes.requests import UNKNOWN, Config, FreshReads, Level, Manual, client_of
from harness.config import Settings
from harness.execution import ManualTicks
from harness.scheduling import (
    Backfill,
    BackfillError,
    BackfillProgress,
    BackfillRefused,
    ScopeError,
    Switched,
    UnknownLevelError,
    backfill_progress,
    cancel_backfill,
    clear_cancel,
    forecast_backfill,
    request_backfill,
    switch_level,
)
from harness.scheduling import cancel as cancel_scope

router = APIRouter(tags=["control"])

MAX_NOTE = 2000
"""Characters of a pause reason or note given over HTTP."""
STOPPING: dict[int | str, dict[str, Any]] = {
    409: {"model": Problem, "description": "The server is stopping"}
}
UNPARSED: dict[int | str, dict[str, Any]] = {
    400: {"model": Problem, "description": "The body is not JSON"}
}
"""FastAPI's answer to a route's body that does not parse, before any field is checked."""


def _known(settings: Settings, level: str) -> None:
    if level not in settings.levels:
        known = ", ".join(settings.levels) or "none"
        raise HTTPException(404, f"no level named {level!r} (known: {known})")


def _start(manual: ManualTicks, level: str, force: bool) -> Started:
    tick_id = manual.start(level, force=force)
    if tick_id is None:
        raise HTTPException(409, "the server is stopping: it starts no tick")
    return Started(level=level, tick_id=tick_id, page=f"/ui/ticks/{tick_id}")


@router.post("/levels/{level}/tick", status_code=202, responses=UNKNOWN | STOPPING)
def run_now(
    level: Level,
    settings: Config,
    manual: Manual,
    force: Annotated[
        bool, Query(description="Run even if the level is paused or over its budget.")
    ] = False,
) -> Started:
    """Start one tick now in the manual lane, as `tickwork tick LEVEL` does, owned here.

    The tick obeys pause, budget and caps unless `force`; the answer does not wait for
    it to be recorded (its page waits). A server that is stopping starts none (409).
    """
    _known(settings, level)
    return _start(manual, level, force)


@router.post("/ticks/{tick_id}/rerun", status_code=202, responses=UNKNOWN | STOPPING)
def rerun(tick_id: str, reads: FreshReads, manual: Manual) -> Started:
    """Run a tick's level once more now, in the manual lane (its page's re-run button).

    The new tick is a tick of the level as it is configured now (its prompt, model
    and route), obeying pause and budget like any tick started by hand.
    """
    detail = reads.tick(tick_id)
    level = detail.tick.level if detail is not None and detail.tick is not None else None
    if level is None or level not in reads.settings.levels:
        raise HTTPException(404, f"no tick {tick_id!r} of a configured level in the store")
    return _start(manual, level, force=False)


REFUSED: dict[int | str, dict[str, Any]] = {
    409: {"model": Problem, "description": "Its forecast crosses a stop or pause budget"}
}


@router.post("/levels/{level}/backfill", status_code=202, responses=UNKNOWN | UNPARSED | REFUSED)
def backfill(
    level: Level, body: BackfillBody, request: Request, response: Response, reads: FreshReads
) -> BackfillView | BackfillForecast:
    """Run the level's slots in [from, to) that have no tick yet, as `tickwork backfill`.

    Recorded for the running services, which claim the slots (each once, across
    replicas) at most `max` in flight at once; its progress is in `GET /status`. An
    unknown level is a 404, a bad range a 422 naming the field (nothing recorded). With
    `dry_run`, the answer (200) is its forecast and nothing is recorded; a run whose
    forecast crosses a `stop` or `pause` budget is a 409 naming it, unless `force`.
    """
    settings = reads.settings
    _known(settings, level)
    try:
        if body.dry_run:
            response.status_code = 200
            forecast = forecast_backfill(
                reads.budget_model(), level, body.start, body.end, body.max
            )
            return BackfillForecast.of(forecast)
        requested = request_backfill(
            settings,
            reads.store,
            level,
            body.start,
            body.end,
            overlap=body.overlap,
            max_at_once=body.max,
            by=client_of(request),
            budgets=reads.budget_model(),
            force=body.force,
        )
    except BackfillRefused as exc:
        raise HTTPException(409, str(exc)) from exc
    except BackfillError as exc:
        raise HTTPException(422, str(exc)) from exc
    return BackfillView.of(
        BackfillProgress(
            Backfill(requested, "open"), backfill_progress(settings, reads.store, requested)
        )
    )


@router.post("/backfills/{backfill_id}/cancel", responses=UNKNOWN)
def cancel_backfill_route(backfill_id: str, request: Request, reads: FreshReads) -> Cancelled:
    """Cancel a backfill, as `tickwork cancel --backfill` does.

    No more of its slots are claimed and its ticks in flight are cancelled (404 for no
    open backfill of that id).
    """
    try:
        flying = cancel_backfill(reads.store, backfill_id, client_of(request))
    except BackfillError as exc:
        raise HTTPException(404, str(exc)) from exc
    return Cancelled(scope=backfill_id, scopes=flying, matching=flying)


@router.post("/levels/{level}/{action}", responses=UNKNOWN)
def switch(
    level: Level,
    action: Literal["pause", "resume"],
    request: Request,
    reads: FreshReads,
    reason: Annotated[
        str, Query(min_length=1, max_length=MAX_NOTE, description="Why, for the ledger.")
    ] = "paused by operator",
    note: Annotated[
        str | None,
        Query(max_length=MAX_NOTE, description="A note for whoever resumes the level."),
    ] = None,
) -> Switched:
    """Pause a level (its slots are skipped until resumed) or resume it, as the CLI does.

    A pause takes a reason and a note, as `tickwork pause --reason --note` does.
    """
    try:
        return switch_level(
            reads.settings,
            reads.store,
            level,
            pause=action == "pause",
            by=client_of(request),
            reason=reason,
            note=note,
        )
    except UnknownLevelError as exc:
        raise HTTPException(404, str(exc)) from exc


@router.post("/cancel/{scope}", responses=UNKNOWN)
def cancel(
    scope: str,
    request: Request,
    reads: FreshReads,
    force: Annotated[
        bool, Query(description="Record a scope that matches no level and no tick.")
    ] = False,
) -> Cancelled:
    """Cancel a level's ticks until cleared, or the ticks in flight a tick id prefix names.

    As `tickwork cancel`: a scope matching no level and no tick in flight is a 404
    unless `force`; a tick's scope ends with its tick.
    """
    try:
        scopes, matching = cancel_scope(
            reads.store, scope, client_of(request), reads.settings.levels, force
        )
    except ScopeError as exc:
        raise HTTPException(404, str(exc)) from exc
    return Cancelled(scope=scope, scopes=scopes, matching=[t.tick_id for t in matching])


@router.delete("/cancel/{scope}")
def clear(scope: str, request: Request, reads: FreshReads) -> Cleared:
    """End a cancel scope, as `tickwork cancel --clear`."""
    return Cleared(scope=scope, cleared=clear_cancel(reads.store, scope, by=client_of(request)))
