"""Records of several sources, each in global order, read as one: a position once.

History is read from more than one place at a time: archives and the hot store (a
rebuild), packed tick rows and `events` (reads, folds, an archive run). An event can be
in two of them for a while (an archive whose events were not all deleted yet when a run
was killed; a tick compacted between two reads), so the merge gives each position once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from itertools import chain
from operator import itemgetter
from typing import Any, TypeVar

T = TypeVar("T")

_END = object()
_FIRST_FIELD: Callable[[Any], int] = itemgetter(0)
"""A tuple record's position (fold data, archive lines)."""


def merged(
    sources: Iterable[Iterable[T]], position: Callable[[T], int] = _FIRST_FIELD
) -> Iterator[T]:
    """The sources' records in global order, each `position` once.

    Empty sources are dropped first, and a single one left is passed through as it is:
    folding the hot store alone (no archive, nothing packed) is the common case, and a
    heap over millions of records cost it a third of its time.
    """
    started: list[Iterator[T]] = []
    for source in sources:
        rest = iter(source)
        first: Any = next(rest, _END)
        if first is not _END:
            started.append(chain([first], rest))
    if len(started) == 1:
        yield from started[0]
        return
    last = None
    for record in heapq.merge(*started, key=position):
        at = position(record)
        if at != last:
            last = at
            yield record
