"""An archived day's events leave the hot store, and its ticks every read model, together.

The archive run (`harness.scheduling.archiving`) decides what leaves and when; these are
its two deletions, each one transaction on the projector's store that deletes the events
(`harness.store.retention`), the packed rows of the ticks they close
(`harness.store.tick_rows.forget`) and the ticks' read-model rows (`Projector.archived`):
a kill leaves the ticks either in the store and every read model, or in none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date
from typing import Any

from harness.projections.projector import Projector
from harness.store import LeavingDay, delete_events, forget, leave_day

Batches = Callable[[], Iterable[tuple[list[dict[str, Any]], set[str]]]]
"""The day archive's records, in global order, a batch at a time with the ticks it names;
called again for a second pass."""


def delete_archived(
    projector: Projector, day: date, batch: list[dict[str, Any]], tick_ids: set[str]
) -> int:
    """Delete one batch of `day`'s archived records and mark its ticks; how many records left.

    A tick's packed row leaves with the batch holding its last record. Records already
    gone are no-ops, so a deletion cut short is simply run again.
    """
    positions = [record["global_position"] for record in batch]
    with projector.store.write_transaction() as conn:
        deleted = delete_events(conn, positions)
        projector.archived(conn, day, tick_ids)
        return deleted + forget(conn, tick_ids, positions[-1])


def drop_archived_day(
    projector: Projector, day: date, batches: Batches, go_on: Callable[[], None]
) -> tuple[int, bool]:
    """PostgreSQL: the day leaves as its partitions, in one transaction; (records left, rows too).

    Every batch is sorted by partition and its ticks marked; its stragglers of earlier
    days are deleted. The second value says whether the day's packed rows left as their
    partition too; if not (it holds a row the archive does not, a tick packed since),
    they are deleted, the archive read again. `go_on` is called before each batch: what it
    raises rolls the whole day back. Raises `PartitionHeld` when the day's partition of
    `events` holds an event the archive does not: nothing left.
    """
    leaving, left = LeavingDay(day), 0
    with projector.store.write_transaction() as conn:
        for batch, tick_ids in batches():
            go_on()
            straggling = leaving.sort(conn, batch)
            projector.archived(conn, day, tick_ids)
            left += forget(conn, straggling)
        left += leave_day(conn, leaving)
        if not leaving.rows_left:
            for _, tick_ids in batches():
                left += forget(conn, tick_ids)
    return left, leaving.rows_left
