"""The store's own vocabulary: expected versions, where an append landed, and its errors.

The records it takes and gives back (`NewEvent`, `StoredEvent`) are plain data in
`harness.contracts.records`: the store knows nothing of pydantic event classes, it stores
a type name, a schema version and two JSON objects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from harness.folds import EventData

__all__ = [
    "ANY",
    "NO_STREAM",
    "AppendResult",
    "ConcurrencyError",
    "EventData",
    "EventIdConflictError",
    "ExpectedVersion",
    "SchemaError",
    "StoreError",
    "StoreUnavailableError",
    "StreamState",
    "Window",
]


class StreamState(enum.Enum):
    """Expected stream states that are not an exact version."""

    ANY = "any"
    NO_STREAM = "no_stream"


ANY = StreamState.ANY
NO_STREAM = StreamState.NO_STREAM
ExpectedVersion = int | StreamState
"""An exact version (the stream's last position; 0 is never valid, use NO_STREAM) or a state."""


@dataclass(frozen=True, slots=True)
class Window:
    """A run of consecutive events after a position, counted, not measured in positions.

    Positions need not be dense (PostgreSQL's may jump by a million between two
    transactions), so a fold sized by positions could hold no event or all of them.
    """

    after: int
    """The window holds the events after this position ..."""
    end: int
    """... up to and including this one."""
    events: int
    """How many events it holds, of every type."""


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
    """The store cannot take this right now; nothing was written.

    Connection refused, locked past the timeout, or beaten by concurrent writes on every retry.
    """


class SchemaError(StoreError):
    """The store's schema is not at the revision this code needs."""
