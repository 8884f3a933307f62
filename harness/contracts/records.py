"""The records the event store takes and gives back: a type name, a version, two JSON objects.

They are plain data of their own so that events (`harness.contracts.events`) can map to
and from them without importing the store that persists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended."""

    event_id: UUID
    type: str
    version: int
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event as stored: one row of the `events` table."""

    global_position: int
    event_id: UUID
    stream_id: str
    stream_position: int
    type: str
    version: int
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: datetime
