"""A local, fsynced JSONL spool for events the store could not take right now.

When the store is unreachable an append goes here instead of being lost; any later process
that opens the store ingests the spool. Ingestion appends with the events' own ids, so a
line replayed twice (a crash between append and delete) is a no-op the second time.

Each process writes its own file under an exclusive `flock`, and re-opens it if an
ingester removed it meanwhile, so no write lands in an unlinked file.
"""

from __future__ import annotations

import fcntl
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson

from harness.contracts import NewEvent
from harness.files import make_private_folder
from harness.store.base import EventStore
from harness.store.records import ANY, AppendResult, StoreUnavailableError


@dataclass(frozen=True)
class IngestReport:
    """What an ingest did, so its caller can report it, corrupt lines included."""

    appended: int
    duplicates: int
    files: int
    corrupt_lines: int


def _encode(stream_id: str, events: Sequence[NewEvent]) -> bytes:
    entry = {
        "stream_id": stream_id,
        "events": [
            {
                "event_id": str(e.event_id),
                "type": e.type,
                "version": e.version,
                "data": e.data,
                "metadata": e.metadata,
            }
            for e in events
        ],
    }
    return orjson.dumps(entry) + b"\n"


def _decode(line: bytes) -> tuple[str, list[NewEvent]]:
    entry: dict[str, Any] = orjson.loads(line)
    events = [
        NewEvent(
            event_id=UUID(e["event_id"]),
            type=e["type"],
            version=e["version"],
            data=e["data"],
            metadata=e["metadata"],
        )
        for e in entry["events"]
    ]
    return entry["stream_id"], events


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """The spool directory: `write` from any process, `ingest` into a reachable store."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _own_file(self) -> Path:
        return self.directory / f"{socket.gethostname()}-{os.getpid()}.jsonl"

    def files(self) -> list[Path]:
        """The spooled files of every process, oldest name first, in the order they are ingested."""
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob("*.jsonl"))

    def pending(self) -> int:
        """Entries (appends) waiting to be ingested."""
        return sum(path.read_bytes().count(b"\n") for path in self.files())

    def write(self, stream_id: str, events: Sequence[NewEvent]) -> Path:
        """Durably record one append; returns the spool file it went to."""
        make_private_folder(self.directory)
        path = self._own_file()
        line = _encode(stream_id, events)
        while True:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.fstat(fd).st_ino == os.stat(path).st_ino
                except FileNotFoundError:
                    same = False
                if not same:
                    continue  # an ingester removed it between our open and our lock
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            _fsync_dir(self.directory)
            return path

    def ingest(self, store: EventStore) -> IngestReport:
        """Append every spooled entry to the store, then remove the files that are done.

        Lines that cannot be parsed (a write torn by a crash) are kept in `<file>.corrupt`
        for an operator to look at, never silently dropped.
        """
        appended = duplicates = corrupt = done = 0
        for path in self.files():
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if not os.path.exists(path):
                    continue
                with open(fd, "rb", closefd=False) as handle:
                    lines = [line for line in handle.read().split(b"\n") if line.strip()]
                bad: list[bytes] = []
                for line in lines:
                    try:
                        stream_id, events = _decode(line)
                    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                        bad.append(line)
                        continue
                    result = store.append(stream_id, events, ANY)
                    duplicates += result.duplicate
                    appended += not result.duplicate
                if bad:
                    corrupt += len(bad)
                    with open(path.with_suffix(".corrupt"), "ab") as keep:
                        keep.write(b"\n".join(bad) + b"\n")
                        os.fsync(keep.fileno())
                os.unlink(path)
                done += 1
            finally:
                os.close(fd)
        if done:
            _fsync_dir(self.directory)
        return IngestReport(appended, duplicates, done, corrupt)


def append_or_spool(
    store: EventStore | None, spool: Spool, stream_id: str, events: Sequence[NewEvent]
) -> AppendResult | Path:
    """Append to the store; when it is unreachable (or was never opened), spool instead."""
    if store is not None:
        try:
            return store.append(stream_id, events, ANY)
        except StoreUnavailableError:
            pass
    return spool.write(stream_id, events)
