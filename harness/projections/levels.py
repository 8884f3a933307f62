"""Which levels are paused: read from the level streams, whoever paused them.

Not a table but a query every stage after the projections needs (the scheduler before
each wave, the digests, the operator's controls), so it lives here, on the store API.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.contracts.events import level_stream
from harness.store import EventStore


def paused_levels(store: EventStore, levels: Iterable[str]) -> set[str]:
    """Levels paused (fail-closed after infrastructure failures, or by an operator).

    One read for any number of levels: a scheduler asks this for every slot of a wave.
    """
    names = {level_stream(level): level for level in levels}
    switches = store.read_streams(names, types=("LevelPaused", "LevelResumed"))
    return {
        names[s] for s, history in switches.items() if history and history[-1].type == "LevelPaused"
    }


def level_paused(store: EventStore, level: str) -> bool:
    """Whether one level is paused, for callers that ask about a single level."""
    return level in paused_levels(store, [level])
