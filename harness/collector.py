"""The cyclic garbage collector's pace in tickwork's processes.

A tickwork process starts by importing thousands of modules (a cold tick about 2,600:
Strands, a model SDK's pydantic types, SQLAlchemy). At CPython's default pace, a young
collection every 700 new container objects, the collector scans that growing heap for
cycles again and again and finds next to none. An interpreter that imports a tick's
modules and runs one throwaway tick took 2.33 s of CPU at that pace and 2.11 s at one
young collection every `YOUNG_OBJECTS` (2.04 s at 50,000; five runs each, alternated).
Cycles are still collected: garbage in one waits for at most that many new objects.

The `tickwork` command and a cold tick take this pace. A fork server pauses the collector
while it warms up and freezes what it imported; the ticks it forks keep the default pace,
which holds each one's private memory where it was (a held tick's USS grew by a tenth at
50,000).
"""

from __future__ import annotations

import gc

YOUNG_OBJECTS = 10_000
"""New container objects between two young collections (CPython's default: 700)."""


def pace_collector() -> None:
    """Collect cycles at tickwork's pace from now on; a forked child keeps the pace."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)
