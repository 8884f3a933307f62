"""Jitter: each slot fires a deterministic delay after its time, the same on every replica.

A thousand levels on `* * * * *` would otherwise all fire at :00 and hit the provider in
the same second. The delay lies in [0, jitter) and comes from a hash of (level, slot),
not from a random draw: every replica, and every restart, fires a slot at the same
instant, and the slot itself (its tick id, its claim) stays the un-jittered time, so
replicas still claim each slot once. How late a slot was claimed (fire lag) is measured
from its jittered time (`TickScheduled.fire_at`).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from harness.config import Settings

_RESOLUTION = 1_000_000
"""Delays are whole microseconds."""


def jitter_delay(level: str, slot: datetime, jitter_seconds: float) -> timedelta:
    """The delay in [0, jitter) of the level's slot, the same on every replica.

    From sha256 of both, not Python's `hash` (randomized per process).
    """
    span = int(jitter_seconds * _RESOLUTION)
    if span <= 0:
        return timedelta(0)
    key = f"{level}\0{slot.astimezone(UTC).isoformat()}".encode()
    draw = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
    return timedelta(microseconds=draw % span)


class FireTimes:
    """When each level's slots fire: the slot plus the level's jitter."""

    def __init__(self, settings: Settings) -> None:
        self.take(settings)

    def take(self, settings: Settings) -> None:
        """Each level's jitter (its own, else `[scheduling] jitter`): at start and reload."""
        self.jitters = {level: settings.jitter_for(level) for level in settings.levels}

    def fire_at(self, level: str, slot: datetime) -> datetime:
        """The instant the level's slot fires (its slot time if it has no jitter)."""
        return slot + jitter_delay(level, slot, self.jitters.get(level, 0.0))

    def delays(self) -> dict[str, float]:
        """The levels that have a jitter, with its seconds."""
        return {level: seconds for level, seconds in self.jitters.items() if seconds > 0}
