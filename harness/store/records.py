"""The store's own vocabulary: plain records in and out, and the errors it raises.

The store knows nothing of pydantic event classes: it stores a type name, a schema version
and two JSON objects. `harness.contracts.events` turns typed events into these records and back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

Durability = Literal["process", "power"]
"""What a committed append survives.

`process`: any crash of tickwork's own processes (a tick killed with SIGKILL loses nothing
it committed). SQLite in WAL with `synchronous=NORMAL`; PostgreSQL appends with
`synchronous_commit=off`, so a crash of the database server or the machine may lose the
last fraction of a second of appends (never reorder or corrupt them). `power`: survives
those too, at one fsync per append, which serialized appends cannot share.
"""


class StreamState(enum.Enum):
    """Expected stream states that are not an exact version."""

    ANY = "any"
    NO_STREAM = "no_stream"


ANY = StreamState.ANY
NO_STREAM = StreamState.NO_STREAM
ExpectedVersion = int | StreamState
"""An exact version (the stream's last position; 0 is never valid, use NO_STREAM) or a state."""


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


EventData = tuple[int, str, dict[str, Any]]
"""(global_position, type, data) of an event read for a fold: a plain tuple, as a NamedTuple
costs ~0.8 s per million and a fold needs nothing else of the record."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where an append landed. `duplicate` is true when every event id was already stored."""

    positions: tuple[int, ...]
    stream_version: int
    duplicate: bool = False


class StoreError(Exception):
    """Base class of everything the event store raises on purpose."""


class ConcurrencyError(StoreError):
    """The stream was not at the expected version; nothing was written."""

    def __init__(self, stream_id: str, expected: ExpectedVersion, actual: int) -> None:
        shown = expected.value if isinstance(expected, StreamState) else expected
        super().__init__(
            f"stream {stream_id!r}: expected version {shown}, but the stream is at {actual}"
        )
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


class EventIdConflictError(StoreError):
    """Some, but not all, event ids of a batch are already stored: not a retry of one append."""


class StoreUnavailableError(StoreError):
    """The store cannot be reached right now (connection refused, locked past the timeout)."""


class SchemaError(StoreError):
    """The store's schema is not at the revision this code needs."""
