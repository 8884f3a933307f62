"""`/status`, `/levels` and `/workers`: what runs, what is scheduled, who works."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from harness.api.models import Status, Worker
from harness.api.routes.requests import UNKNOWN, Config, FreshReads, Levels
from harness.contracts import utcnow
from harness.scheduling import LevelDescription, describe_levels

router = APIRouter(tags=["status"])


@router.get("/status")
def status(reads: FreshReads) -> Status:
    """Levels and budgets, ticks running and queued, paused levels, store and lag.

    What `tickwork status` prints: running ticks with their runtime so far, the store's
    last position and how far each projection lags behind it.
    """
    return Status.of(reads.snapshot())


@router.get("/levels", responses=UNKNOWN)
def describe(reads: FreshReads, settings: Config, level: Levels = None) -> list[LevelDescription]:
    """Each level's schedule in words, next 5 fire times, last runs, runs and pause.

    What `tickwork levels` prints: fire times with jitter in the level's zone and UTC,
    the pause with who, why, since when and its note.
    """
    names = list(dict.fromkeys(level)) if level else list(settings.levels)
    unknown = [name for name in names if name not in settings.levels]
    if unknown:
        raise HTTPException(404, f"no level named {unknown[0]!r}")
    return describe_levels(settings, reads.store, names, utcnow())


@router.get("/workers")
def list_workers(reads: FreshReads) -> list[Worker]:
    """The workers of the procrastinate executor: host, concurrency, running, heartbeat.

    Empty with the local executor, whose ticks run in `tickwork run` itself.
    """
    return reads.workers()
