"""The records the event store takes and gives back: a type name, a version, two JSON objects.

They are plain data of their own so that events (`harness.contracts.events`) can map to
and from them without importing the store that persists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import orjson

Durability = Literal["process", "power"]
"""What a committed append survives.

`process`: any crash of tickwork's own processes (a tick killed with SIGKILL loses nothing
it committed). SQLite in WAL with `synchronous=NORMAL`; PostgreSQL appends with
`synchronous_commit=off`, so a crash of the database server or the machine may lose the
last fraction of a second of appends (never reorder or corrupt them). `power`: survives
those too: on SQLite at one fsync per append (its appends are serialized), on PostgreSQL
at one per group of appends committing together (they take no lock).
"""


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event about to be appended."""

    event_id: UUID
    type: str
    version: int
    data: dict[str, Any]
    metadata: dict[str, Any] = field(default_factory=dict)


class StoredEvent:
    """An event as stored: one row of the `events` table; read-only by contract.

    Its two JSON objects are parsed on first access (`from_row` keeps the text the database
    gave): a page read to find where the next one starts, or filtered on its type, never
    pays for JSON it does not look at, which was a third of a PostgreSQL page's time. A
    plain class with slots rather than a frozen dataclass, whose `__init__` costs a
    `object.__setattr__` call per field and per row.
    """

    __slots__ = (
        "_data",
        "_metadata",
        "event_id",
        "global_position",
        "recorded_at",
        "stream_id",
        "stream_position",
        "type",
        "version",
    )

    global_position: int
    event_id: UUID
    stream_id: str
    stream_position: int
    type: str
    version: int
    _data: dict[str, Any] | str | bytes
    _metadata: dict[str, Any] | str | bytes
    recorded_at: datetime

    def __init__(
        self,
        global_position: int,
        event_id: UUID,
        stream_id: str,
        stream_position: int,
        type: str,
        version: int,
        data: dict[str, Any],
        metadata: dict[str, Any],
        recorded_at: datetime,
    ) -> None:
        self.global_position = global_position
        self.event_id = event_id
        self.stream_id = stream_id
        self.stream_position = stream_position
        self.type = type
        self.version = version
        self._data = data
        self._metadata = metadata
        self.recorded_at = recorded_at

    @classmethod
    def from_row(cls, row: StoredRow) -> StoredEvent:
        """A record of a row whose `data` and `metadata` are still JSON text."""
        record = cls.__new__(cls)
        (
            record.global_position,
            record.event_id,
            record.stream_id,
            record.stream_position,
            record.type,
            record.version,
            record._data,
            record._metadata,
            record.recorded_at,
        ) = row
        return record

    @property
    def data(self) -> dict[str, Any]:
        """The event's payload, parsed once on first access."""
        self._data = data = _parsed(self._data)
        return data

    @property
    def metadata(self) -> dict[str, Any]:
        """The event's metadata, parsed once on first access."""
        self._metadata = metadata = _parsed(self._metadata)
        return metadata

    def as_dict(self) -> dict[str, Any]:
        """Every field by name, JSON parsed, as `dataclasses.asdict` gave."""
        return {
            "global_position": self.global_position,
            "event_id": self.event_id,
            "stream_id": self.stream_id,
            "stream_position": self.stream_position,
            "type": self.type,
            "version": self.version,
            "data": self.data,
            "metadata": self.metadata,
            "recorded_at": self.recorded_at,
        }

    def __eq__(self, other: object) -> bool:
        """Equal records hold equal fields, whether their JSON was parsed yet or not."""
        if not isinstance(other, StoredEvent):
            return NotImplemented
        return self.as_dict() == other.as_dict()

    __hash__ = None  # type: ignore[assignment]  # holds dicts, as the dataclass did

    def __repr__(self) -> str:
        """As the dataclass printed it, JSON parsed."""
        fields = ", ".join(f"{name}={value!r}" for name, value in self.as_dict().items())
        return f"StoredEvent({fields})"


def _parsed(value: dict[str, Any] | str | bytes) -> dict[str, Any]:
    """The object itself, or parsed from its JSON text."""
    if isinstance(value, dict):
        return value
    parsed: dict[str, Any] = orjson.loads(value)
    return parsed


StoredRow = tuple[int, UUID, str, int, str, int, str | bytes, str | bytes, datetime]
"""A row of `events` in column order, its two JSON objects still text."""
