"""The calls a killed worker left in flight, booked (estimated) by whoever ends the attempt.

The worker records `ModelCallStarted` before it sends a call and the call's `ModelCalled`
(after its `BudgetSpent`) when it ended. When the worker left no result file (killed, timed
out, crashed), each call of the attempt that has a start and no end may have been answered
and billed after the worker died: each is booked as an estimated `BudgetSpent` (source
`runner`, `workers.call_booking.cut_off`). Calls are paired by their number, not by order:
an agent CLI can have a call sent before the one before it is booked, so the last start is
not always the only open one. A call refused before the kill has its `ModelCalled` and
costs nothing; the booking's id derives from the start's, so a call booked twice (the
runner and a reconciling service) is recorded once.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.contracts import (
    BudgetSpent,
    ModelCalled,
    ModelCallStarted,
    StoredEvent,
    TickAttemptFailed,
)
from harness.prices import PriceBook
from workers import cut_off


def cut_off_calls(events: Sequence[StoredEvent], prices: PriceBook) -> list[BudgetSpent]:
    """The estimated spend of each call of the tick's last attempt that was started, not ended.

    Call it only once the attempt's worker is gone and left no result file. An attempt's
    calls are those after the previous attempt's `TickAttemptFailed` (each worker numbers
    its calls from 1). Each is booked at its model's price on the day it was sent.
    """
    open_calls: dict[int, StoredEvent] = {}
    for stored in events:
        if stored.type == ModelCallStarted.type:
            open_calls[stored.data["call"]] = stored
        elif stored.type == ModelCalled.type:
            open_calls.pop(stored.data.get("call", 1), None)
        elif stored.type == TickAttemptFailed.type:
            open_calls.clear()
    return [
        cut_off(start, prices.call_price(start.data["model"], start.data["occurred_at"][:10]))
        for start in open_calls.values()
    ]
