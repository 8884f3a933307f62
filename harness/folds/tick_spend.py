"""The tick spend read model's fold kernel: each tick's spend, governor interventions, hedges.

Beside `harness.folds.spend` for the same reason: a worker process folds it without the
projections, the store or the price tables. A digest sums it over the ticks of its
period, so reading a period costs its ticks, not every event they recorded.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from operator import itemgetter

from harness.folds.ranges import Data
from harness.folds.spend import add_call
from harness.folds.sums import Sums

COUNTERS = ""
"""The model of a tick's row of counters (governor interventions, hedges, being a twin)."""

_SPENT = itemgetter(
    "tick_id",
    "model",
    "occurred_at",
    "prompt_tokens",
    "completion_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "estimated",
)


def tick_spend_sums(batch: Iterable[Data], bounds: tuple[int, ...]) -> Sums:
    """Sums per (tick id, model, UTC day, bucket) of BudgetSpent, GovernorFired, HedgeStarted.

    The nine sums: prompt, completion, cache read and cache write tokens, calls and
    estimated calls (a `BudgetSpent`, bucketed by prompt size as `spend_sums` does);
    governor interventions, twins started and being a twin, kept on the tick's row of
    counters (model `COUNTERS`, bucket -1). A kernel sees data, not types: a
    `HedgeStarted` is the one with a `twin_id`, a `GovernorFired` the one with a
    `decision`. A governor event of no tick (the proxy's) counts nowhere.
    """
    sums: Sums = {}

    def row(key: tuple[str, str, str, int]) -> list[int]:
        found = sums.get(key)
        if found is None:
            found = sums[key] = [0, 0, 0, 0, 0, 0, 0, 0, 0]
        return found

    for data in batch:
        day = data["occurred_at"][:10]
        if "twin_id" in data:
            row((data["tick_id"], COUNTERS, day, -1))[7] += 1
            row((data["twin_id"], COUNTERS, day, -1))[8] += 1
        elif "decision" in data:
            if data.get("tick_id"):
                row((data["tick_id"], COUNTERS, day, -1))[6] += 1
        else:
            tick_id, model, at, prompt, completion, read, write, estimated = _SPENT(data)
            spent = row((tick_id, model, at[:10], bisect_left(bounds, prompt)))
            add_call(spent, prompt, completion, read, write, estimated)
    return sums
