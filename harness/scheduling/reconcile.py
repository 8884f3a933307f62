"""On start, every tick this host left without a terminal event gets one.

A `tickwork run` killed mid-tick leaves workers running in their own process groups and
tick streams without an end. Its successor records `TickLost` for a tick claimed but
never started, and hands each started one to its executor, which adopts a worker that
still runs (watched and killed at its original deadline), completes a tick from the
result file it wrote while nobody watched, and records `TickLost` for the rest
(`harness.execution.adopt`). Ticks started on other hosts are theirs to reconcile.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from harness.contracts.events import TERMINAL_TYPES, tick_stream
from harness.projections import Projector
from harness.projections.ticks import open_ticks
from harness.scheduling.handoff import Handoff
from harness.store import EventStore

NEVER_STARTED_AFTER = timedelta(seconds=60)
"""A claimed tick nobody started within this long: its scheduler died in between."""


def reconcile(
    store: EventStore,
    executor: Handoff,
    projector: Projector,
    report: Callable[[str], None],
    never_started_after: timedelta = NEVER_STARTED_AFTER,
) -> None:
    """End every unfinished tick of this host, or hand it to `executor` to adopt."""
    projector.catch_up(["ticks"])
    with store.read_transaction() as conn:
        unfinished = open_ticks(conn)
    now = datetime.now(UTC)
    for tick_id, level in unfinished:
        events = store.read_stream(tick_stream(tick_id))
        if not events or any(e.type in TERMINAL_TYPES for e in events):
            continue
        started = next((e for e in reversed(events) if e.type == "TickStarted"), None)
        if started is None:
            if now - events[0].recorded_at > never_started_after:
                lost = "claimed but never started: its scheduler stopped first"
                executor.record_lost(tick_id, level, lost)
                report(f"{tick_id} lost ({lost})")
            continue
        executor.adopt(started, now)
