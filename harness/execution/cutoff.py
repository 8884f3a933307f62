"""The spend of a model call a killed worker left in flight, booked by whoever ends the attempt.

The worker records `ModelCallStarted` before it sends a call and `BudgetSpent` after it
answered; its calls follow one another, so only the last call of an attempt can be cut
off. When the worker left no result file (killed, timed out, crashed), that last call,
if no spend follows it, may have been answered and billed after the worker died: it is
booked as an estimated `BudgetSpent` (source `runner`) of its estimated input tokens.
The booking's id derives from the start's, so the runner and a reconciling service that
both book one call record it once. A call the upstream refused just before the kill is
booked too: in doubt the ledger counts a call rather than miss one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID, uuid5

from harness.contracts import BudgetSpent, ModelCallStarted, StoredEvent, TickAttemptFailed

BOOKING_NAMESPACE = UUID("5a4f3c0e-9d1b-4c55-8a57-0c7d2b1e6f12")
"""Namespace of the ids of estimated bookings, derived from the id of the call's start."""

ATTEMPT_BOUNDARIES = frozenset({BudgetSpent.type, TickAttemptFailed.type})
"""After these, the calls started before are settled: spent, or ended with their attempt."""


def cut_off_call(events: Sequence[StoredEvent]) -> BudgetSpent | None:
    """The estimated spend of the tick's last started call that has none, if there is one.

    Call it only once the attempt's worker is gone and left no result file.
    """
    start: StoredEvent | None = None
    for stored in events:
        if stored.type == ModelCallStarted.type:
            start = stored
        elif stored.type in ATTEMPT_BOUNDARIES:
            start = None
    if start is None:
        return None
    data = start.data
    return BudgetSpent(
        event_id=uuid5(BOOKING_NAMESPACE, str(start.event_id)),
        occurred_at=datetime.fromisoformat(data["occurred_at"]),
        tick_id=data["tick_id"],
        level=data["level"],
        model=data["model"],
        prompt_tokens=data["estimated_input_tokens"],
        completion_tokens=0,
        estimated=True,
        source="runner",
        template_hash=data.get("template_hash"),
    )
