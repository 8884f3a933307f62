"""The event store contract: what every backend promises, in one abstract class.

One SQLAlchemy implementation serves SQLite and PostgreSQL (`harness.store.sql`); the
conformance suite in `tests/test_store_contract.py` runs against both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence

from harness.contracts.records import NewEvent, StoredEvent
from harness.store.records import ANY, AppendResult, ExpectedVersion


class EventStore(ABC):
    """An append-only log of events, ordered globally and per stream."""

    @abstractmethod
    def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent],
        expected_version: ExpectedVersion = ANY,
    ) -> AppendResult:
        """Append events to a stream atomically.

        Raises ConcurrencyError (writing nothing) when the stream is not at
        `expected_version`. A batch whose event ids are all stored already is a no-op that
        reports the stored positions, so a retry never counts twice.
        """

    @abstractmethod
    def create_streams(self, streams: Mapping[str, Sequence[NewEvent]]) -> set[str]:
        """Start every stream of the mapping that does not exist yet, in one transaction.

        Returns the ids of the streams this call created; a stream that exists already is
        left as it is. A scheduler claims a whole wave of slots this way: one commit, not
        one per slot, and of two replicas claiming together each stream goes to one.
        """

    @abstractmethod
    def read_stream(
        self, stream_id: str, after: int = 0, limit: int | None = None
    ) -> list[StoredEvent]:
        """Events of one stream with stream_position > `after`, in stream order."""

    @abstractmethod
    def read_streams(
        self, stream_ids: Iterable[str], types: Iterable[str] | None = None
    ) -> dict[str, list[StoredEvent]]:
        """The events of several streams at once (of `types` only, if given), each in order.

        Every stream asked for is a key; one with no events maps to an empty list.
        """

    @abstractmethod
    def read_all(
        self,
        after_position: int = 0,
        limit: int = 1000,
        types: Iterable[str] | None = None,
    ) -> list[StoredEvent]:
        """Events with global_position > `after_position`, in global order.

        Never skips an event committed by a concurrent writer: a reader that resumes from
        the last position it saw gets every later commit.
        """

    @abstractmethod
    def last_position(self) -> int:
        """The highest global position stored (0 for an empty store)."""

    @abstractmethod
    def stream_version(self, stream_id: str) -> int:
        """The stream's last position (0 when the stream does not exist)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""
