"""The manual lane's cap across processes: each `tickwork tick` waits its turn in the store.

Every `tickwork tick` is a process of its own with an executor of its own, so the
executor's manual lane alone caps one process. The store sees every manual claim (a
`TickScheduled` with `manual`) in the log's order: a manual tick may start once fewer
than the cap of the manual ticks claimed before it are still in flight. Two processes
deciding at once read the same order (each waits until every claim before its own is
readable: `settled_claim`), so they cannot both take the last place. A claim
whose process is gone holds no place (reconciliation ends it).
"""

from __future__ import annotations

from datetime import UTC, datetime

from harness.contracts import TickScheduled, tick_stream
from harness.projections import Projector, open_ticks
from harness.scheduling.budget import settled_claim
from harness.scheduling.reconcile import NEVER_STARTED_AFTER, abandoned
from harness.store import EventStore


def manual_ticks_ahead(store: EventStore, projector: Projector, tick_id: str) -> int:
    """Manual ticks claimed before `tick_id` (a manual claim) and still in flight."""
    ours = settled_claim(store, projector, tick_id)
    unfinished = [tick_stream(open_id) for open_id, _ in open_ticks(store)]
    if ours is None or tick_stream(tick_id) not in unfinished:
        return 0  # ended already, or not claimed: it holds no place and waits for none
    claims = store.read_streams(unfinished, types=[TickScheduled.type])
    now = datetime.now(UTC)
    return sum(
        1
        for events in claims.values()
        for claim in events[:1]
        if claim.data.get("manual")
        and claim.global_position < ours.global_position
        and not abandoned(claim, now, NEVER_STARTED_AFTER)
    )
