"""Archive files: a UTC day's events that left the hot store, written, verified and read back.

One folder per day, `<archive>/<YYYY-MM-DD>/`: `events.jsonl.gz`, the stored records in
global order, one JSON object a line, gzip-compressed; `ticks.idx.gz`, its tick index;
`manifest.json`, written last, with the position range, counts per type, the number of
ticks and the sha256 of the data file and of the index; and `files.tar.gz`, the day's
result and log files. A folder without a manifest is an
archive a killed run left half written: nothing of it left the store, and the next run
writes it again. Readers never trust a file without its manifest: `verify` re-reads the
data file whole, against the sha256 and the counts.

Transcripts leave sooner (`[retention] transcript_days`, at most `hot_days`): the day's
hot transcripts go to `transcripts.jsonl.gz`, their stored `TranscriptEntry` records one a
line, tick by tick, with their own manifest, `transcripts.json` (counts and sha256), written
last as for events. The events archive of the day, written then or later, holds the rest
of its ticks' events; `read_stream` reads a tick back from both.

The data file is a run of gzip members of `MEMBER_LINES` lines each (one gzip stream to
any reader of the whole), and the index says, member by member, where it starts and which
streams it holds: finding one tick (`find_archived`) reads the index and inflates the few
members it names, each checked by its own CRC, instead of a day's whole file. Archives
written before the index have none and are read whole, as they were.

A day is a unit an operator can move (to object storage) and a rebuild can read back
(`harness.store.merging` interleaves archives and the hot store by global position: a
day's positions interleave with events that stay hot, a level's pauses say, and with the
next day's).
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from uuid import UUID

import orjson
from pydantic import BaseModel, ValidationError

from harness.contracts import (
    ARCHIVE_STREAM,
    ArchiveSummary,
    ArchiveWritten,
    StoredEvent,
    tick_id_day,
    tick_stream,
)
from harness.files import atomic_file, write_atomically
from harness.folds import EPOCH, TICK_PREFIX, records_of, restore
from harness.store.base import EventStore
from harness.store.records import EventData, StoreError

EVENTS_FILE = "events.jsonl.gz"
MANIFEST_FILE = "manifest.json"
FILES_FILE = "files.tar.gz"
TRANSCRIPTS_FILE = "transcripts.jsonl.gz"
TRANSCRIPTS_MANIFEST = "transcripts.json"
INDEX_FILE = "ticks.idx.gz"
TRANSCRIPTS_INDEX = "transcripts.idx.gz"
MEMBER_LINES = 2000
"""Records per gzip member of a data file: what reading one tick back inflates, ~50 KB."""
MANIFEST_VERSION = 1
HASH_CHUNK = 1 << 20
TICK_PAGE = 5000
"""Ticks a rebuild tells its read models left for an archive, at once."""


class ArchiveError(StoreError):
    """An archive is missing, incomplete or does not match its manifest; names path and why."""


class Manifest(ArchiveSummary):
    """What an archive's data file holds, written after the file and checked on every read."""

    version: int = MANIFEST_VERSION
    written_at: datetime
    index_sha256: str | None = None
    """Of the tick index (None: an archive written before there was one, read whole)."""


class TranscriptsManifest(BaseModel):
    """What a day's transcripts file holds, written after the file and checked on every read."""

    version: int = MANIFEST_VERSION
    day: date
    ticks: int
    entries: int
    sha256: str
    written_at: datetime
    index_sha256: str | None = None


M = TypeVar("M", Manifest, TranscriptsManifest)


def day_folder(root: Path, day: date) -> Path:
    """The folder of `day`'s archive under the archive folder `root`."""
    return root / day.isoformat()


Line = tuple[int, str, int, str, bytes]
"""A record as the data file takes it: (position, stream id, stream position, type, its line)."""


def _line(event: StoredEvent) -> bytes:
    record = event.as_dict()
    record["event_id"] = str(event.event_id)
    return orjson.dumps(record) + b"\n"


def lines(events: Iterable[StoredEvent]) -> Iterator[Line]:
    """Stored records as the data file's lines."""
    for event in events:
        yield (
            event.global_position,
            event.stream_id,
            event.stream_position,
            event.type,
            _line(event),
        )


def packed_lines(tick_id: str, blob: bytes) -> Iterator[Line]:
    """A packed tick's records as the data file's lines, as `lines` would give them.

    Straight from the packed fields: no record object, no UUID made and printed again.
    """
    level, records = records_of(blob)
    stream_id = f"{TICK_PREFIX}{tick_id}"
    for position, hex_id, stream_position, type_, version, data, metadata, micros, flags in records:
        line = {
            "global_position": position,
            "event_id": _hyphenated(hex_id),
            "stream_id": stream_id,
            "stream_position": stream_position,
            "type": type_,
            "version": version,
            "data": restore(tick_id, level, data, flags),
            "metadata": metadata,
            "recorded_at": EPOCH + timedelta(microseconds=micros),
        }
        yield position, stream_id, stream_position, type_, orjson.dumps(line) + b"\n"


def _hyphenated(hex_id: str) -> str:
    """`str(UUID(hex=hex_id))`, without making the UUID."""
    return f"{hex_id[:8]}-{hex_id[8:12]}-{hex_id[12:16]}-{hex_id[16:20]}-{hex_id[20:]}"


def _event(record: dict[str, Any]) -> StoredEvent:
    return StoredEvent(
        record["global_position"],
        UUID(record["event_id"]),
        record["stream_id"],
        record["stream_position"],
        record["type"],
        record["version"],
        record["data"],
        record["metadata"],
        datetime.fromisoformat(record["recorded_at"]).astimezone(UTC),
    )


def sha256_of(path: Path) -> str:
    """The file's sha256, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class _Indexed:
    """A data file written as gzip members of `MEMBER_LINES` lines, and its tick index.

    Each closed member adds a line to the index: its offset in the file, a tab, the
    streams it holds, in the order they came (no time in any gzip header, no set order:
    the same records make the same files, the same sha256s).
    """

    def __init__(self, raw: BinaryIO, index: BinaryIO) -> None:
        self.raw = raw
        self.index = gzip.GzipFile(fileobj=index, mode="wb", mtime=0)
        self.lines: list[bytes] = []
        self.streams: dict[str, None] = {}

    def write(self, stream_id: str, line: bytes) -> None:
        self.lines.append(line)
        self.streams[stream_id] = None
        if len(self.lines) == MEMBER_LINES:
            self.flush()

    def flush(self) -> None:
        if not self.lines:
            return
        self.index.write(b"%d\t%s\n" % (self.raw.tell(), " ".join(self.streams).encode()))
        data = b"".join(self.lines)
        with gzip.GzipFile(fileobj=self.raw, mode="wb", mtime=0) as out:
            out.write(data)
        self.lines, self.streams = [], {}

    def close(self) -> None:
        self.flush()
        self.index.close()


@contextmanager
def _indexed(path: Path, index: Path) -> Iterator[_Indexed]:
    """An indexed data file at `path`, its index at `index`: both written atomically."""
    with atomic_file(path) as raw, atomic_file(index) as index_raw:
        writer = _Indexed(raw, index_raw)
        yield writer
        writer.close()


def write_archive(folder: Path, day: date, records: Iterable[Line]) -> Manifest:
    """Write the records' lines (in global order) and the index, then the manifest, atomically.

    The data file is complete and fsynced before the manifest names it, so a manifest on
    disk always describes a whole file. Its streams are whole, so each is counted at its
    first record: a day of 1.44M ticks holds no set of them.
    """
    counts: Counter[str] = Counter()
    ticks = first = last = 0
    with _indexed(folder / EVENTS_FILE, folder / INDEX_FILE) as out:
        for position, stream_id, stream_position, type_, line in records:
            if position <= last:
                raise ValueError(f"archive {folder}: events out of global order")
            first = first or position
            last = position
            counts[type_] += 1
            ticks += stream_position == 1
            out.write(stream_id, line)
    manifest = Manifest(
        day=day,
        first_position=first,
        last_position=last,
        events=sum(counts.values()),
        ticks=ticks,
        counts=dict(sorted(counts.items())),
        sha256=sha256_of(folder / EVENTS_FILE),
        written_at=datetime.now(UTC),
        index_sha256=sha256_of(folder / INDEX_FILE),
    )
    write_atomically(folder / MANIFEST_FILE, manifest.model_dump_json(indent=2).encode())
    return manifest


def write_transcripts(folder: Path, day: date, ticks: Iterable[list[StoredEvent]]) -> None:
    """Write the ticks' transcript entries and then their manifest, each atomically."""
    count = entries = 0
    with _indexed(folder / TRANSCRIPTS_FILE, folder / TRANSCRIPTS_INDEX) as out:
        for tick in ticks:
            count += 1
            for _, stream_id, _, _, line in lines(tick):
                entries += 1
                out.write(stream_id, line)
    manifest = TranscriptsManifest(
        day=day,
        ticks=count,
        entries=entries,
        sha256=sha256_of(folder / TRANSCRIPTS_FILE),
        written_at=datetime.now(UTC),
        index_sha256=sha256_of(folder / TRANSCRIPTS_INDEX),
    )
    write_atomically(folder / TRANSCRIPTS_MANIFEST, manifest.model_dump_json(indent=2).encode())


def verify_transcripts(folder: Path) -> TranscriptsManifest:
    """Read the whole transcripts file against its manifest: sha256, entries and ticks."""
    manifest = _manifest(folder / TRANSCRIPTS_MANIFEST, TranscriptsManifest)
    path = folder / TRANSCRIPTS_FILE
    _same_sha(path, manifest.sha256)
    if manifest.index_sha256 is not None:
        _same_sha(folder / TRANSCRIPTS_INDEX, manifest.index_sha256)
    entries = ticks = 0
    stream = None
    try:
        # Written tick by tick: a tick is counted where the stream changes, none held.
        for record in read_fields(folder, TRANSCRIPTS_FILE):
            entries += 1
            ticks += record["stream_id"] != stream
            stream = record["stream_id"]
    except (KeyError, TypeError) as exc:
        raise ArchiveError(f"archive {path}: a line is not an event record: {exc}") from exc
    if (entries, ticks) != (manifest.entries, manifest.ticks):
        raise ArchiveError(
            f"archive {path}: holds {entries} entries of {ticks} ticks, the manifest "
            f"says {manifest.entries} of {manifest.ticks}"
        )
    return manifest


def read_manifest(folder: Path) -> Manifest:
    """The folder's manifest; ArchiveError naming the file when it is missing or unreadable."""
    return _manifest(folder / MANIFEST_FILE, Manifest)


def _manifest(path: Path, kind: type[M]) -> M:
    try:
        manifest = kind.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise ArchiveError(f"archive {path.parent}: {path.name} is missing") from None
    except OSError as exc:
        raise ArchiveError(f"archive {path}: cannot read: {exc.strerror}") from exc
    except ValidationError as exc:
        why = exc.errors()[0]["msg"]
        raise ArchiveError(f"archive {path}: not a valid manifest: {why}") from exc
    if manifest.version != MANIFEST_VERSION:
        raise ArchiveError(f"archive {path}: manifest version {manifest.version} is not known")
    return manifest


def _same_sha(path: Path, expected: str) -> None:
    """ArchiveError naming the file when it is missing or its sha256 is not `expected`."""
    try:
        sha = sha256_of(path)
    except FileNotFoundError:
        raise ArchiveError(f"archive {path}: the data file is missing") from None
    if sha != expected:
        raise ArchiveError(f"archive {path}: sha256 {sha} does not match the manifest's {expected}")


def read_lines(folder: Path, name: str = EVENTS_FILE) -> Iterator[bytes]:
    """The lines of an archive's data file in order, unparsed; ArchiveError on damage."""
    path = folder / name
    try:
        with gzip.open(path, "rb") as data:
            # A chunk at a time: GzipFile's own line reading costs more than the inflating.
            tail = b""
            while chunk := data.read(HASH_CHUNK):
                *whole, tail = (tail + chunk).split(b"\n")
                yield from whole
            if tail:
                yield tail
    except FileNotFoundError:
        raise ArchiveError(f"archive {path}: the data file is missing") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise ArchiveError(f"archive {path}: damaged compressed data: {exc}") from exc


def read_fields(folder: Path, name: str = EVENTS_FILE) -> Iterator[dict[str, Any]]:
    """The records of an archive's data file in order, as parsed JSON; ArchiveError on damage.

    What a pass that looks at a field or two reads: no id or time parsed.
    """
    try:
        yield from map(orjson.loads, read_lines(folder, name))
    except orjson.JSONDecodeError as exc:
        path = folder / name
        raise ArchiveError(f"archive {path}: a line is not an event record: {exc}") from exc


def read_events(folder: Path, name: str = EVENTS_FILE) -> Iterator[StoredEvent]:
    """The records of an archive's data file in order; ArchiveError on a damaged file."""
    for record in read_fields(folder, name):
        yield _checked(folder / name, record)


def _checked(path: Path, record: dict[str, Any]) -> StoredEvent:
    try:
        return _event(record)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveError(f"archive {path}: a line is not an event record: {exc}") from exc


def read_stream(folder: Path, stream_id: str) -> list[StoredEvent]:
    """One stream's events as the archive holds them, with its transcript entries if any.

    By the tick index: the index checked against its manifest's sha256, the members it
    names inflated, each checked by its CRC. An archive written before the index is
    verified and read whole.
    """
    index = read_manifest(folder).index_sha256
    if index is None:
        verify(folder)
        found = [event for event in read_events(folder) if event.stream_id == stream_id]
    else:
        found = _indexed_stream(folder, EVENTS_FILE, INDEX_FILE, index, stream_id)
    if found and (folder / TRANSCRIPTS_MANIFEST).exists():
        found += read_transcript(folder, stream_id)
    return sorted(found, key=lambda event: event.stream_position)


STRAGGLER_DAYS = 7
"""How many days after the one its id names an archived tick is looked for: a tick still
open when its day was archived leaves with a later day's archive."""


def find_archived(
    store: EventStore, root: Path, tick_id: str
) -> tuple[date, list[StoredEvent]] | None:
    """The day whose archive holds a tick that left the store, and its events there.

    An archived tick keeps no row in the store (its rows leave with it, so the store stops
    growing), so it is looked for where its id says: the recorded archive of the day the
    id names, then of the next `STRAGGLER_DAYS`. In each, its index names the parts of the
    data file that hold the tick (`read_stream`), as `tickwork show --archive` reads it.
    None when none holds the tick (an id without a day, a tick archived later than that,
    or no such tick); ArchiveError for an archive that is missing or damaged.
    """
    first = tick_id_day(tick_id)
    if first is None:
        return None
    recorded = sorted(
        {
            date.fromisoformat(str(stored.data["day"]))
            for stored in store.read_stream(ARCHIVE_STREAM)
            if stored.type == ArchiveWritten.type
        }
    )
    stream = tick_stream(tick_id)
    for day in recorded:
        if first <= day <= first + timedelta(days=STRAGGLER_DAYS):
            found = read_stream(day_folder(root, day), stream)
            if found:
                return day, found
    return None


def _indexed_stream(
    folder: Path, name: str, index_name: str, index_sha256: str, stream_id: str
) -> list[StoredEvent]:
    """A stream's records in a data file, read from the members its index names.

    The index is checked against its sha256; each member read, by its gzip CRC.
    """
    index = folder / index_name
    _same_sha(index, index_sha256)
    token = stream_id.encode()
    offsets = []
    with gzip.open(index, "rb") as members:
        for member in members:
            if token in member:
                at, _, streams = member.rstrip(b"\n").partition(b"\t")
                if token in streams.split(b" "):
                    offsets.append(int(at))
    path = folder / name
    quoted = b'"stream_id":' + orjson.dumps(stream_id)
    found = []
    with path.open("rb") as data:
        for offset in offsets:
            for line in _member(data, offset, path).splitlines():
                if quoted in line:
                    event = _checked(path, orjson.loads(line))
                    if event.stream_id == stream_id:
                        found.append(event)
    return found


def _member(data: BinaryIO, offset: int, path: Path) -> bytes:
    """The gzip member at `offset`, inflated and checked by its CRC."""
    data.seek(offset)
    inflate = zlib.decompressobj(wbits=31)
    parts = []
    try:
        while not inflate.eof:
            chunk = data.read(HASH_CHUNK // 16)
            if not chunk:
                raise ArchiveError(f"archive {path}: the member at byte {offset} is cut short")
            parts.append(inflate.decompress(chunk))
    except zlib.error as exc:
        raise ArchiveError(f"archive {path}: damaged member at byte {offset}: {exc}") from exc
    return b"".join(parts)


def read_transcript(folder: Path, stream_id: str) -> list[StoredEvent]:
    """One tick's archived transcript entries: by the file's index, or read whole without one."""
    index = _manifest(folder / TRANSCRIPTS_MANIFEST, TranscriptsManifest).index_sha256
    if index is not None:
        return _indexed_stream(folder, TRANSCRIPTS_FILE, TRANSCRIPTS_INDEX, index, stream_id)
    verify_transcripts(folder)
    return [e for e in read_events(folder, TRANSCRIPTS_FILE) if e.stream_id == stream_id]


def verify(folder: Path) -> Manifest:
    """Read the whole archive against its manifest: sha256, then counts and positions.

    Raises ArchiveError naming the file and what does not match.
    """
    manifest = read_manifest(folder)
    path = folder / EVENTS_FILE
    _same_sha(path, manifest.sha256)
    if manifest.index_sha256 is not None:
        _same_sha(folder / INDEX_FILE, manifest.index_sha256)
    counts: Counter[str] = Counter()
    positions = [0, 0]
    try:
        for record in read_fields(folder):
            position = record["global_position"]
            if position <= positions[1]:
                raise ArchiveError(f"archive {path}: events out of global order")
            positions = [positions[0] or position, position]
            counts[record["type"]] += 1
    except (KeyError, TypeError) as exc:
        raise ArchiveError(f"archive {path}: a line is not an event record: {exc}") from exc
    found = (dict(counts), *positions)
    expected = (manifest.counts, manifest.first_position, manifest.last_position)
    if found != expected:
        raise ArchiveError(
            f"archive {path}: holds {sum(counts.values())} events in positions "
            f"{positions[0]}..{positions[1]}, the manifest says {manifest.events} in "
            f"{manifest.first_position}..{manifest.last_position}"
        )
    return manifest


@dataclass(frozen=True)
class Archive:
    """A recorded archive, found in the archive folder and verified against its record."""

    day: date
    folder: Path
    manifest: Manifest

    def event_data(self, types: Iterable[str]) -> Iterator[EventData]:
        """Its events of `types` as a fold takes them: (position, type, data)."""
        kinds = frozenset(types)
        for record in read_fields(self.folder):
            if record["type"] in kinds:
                yield record["global_position"], record["type"], record["data"]

    def tick_pages(self, size: int = TICK_PAGE) -> Iterator[set[str]]:
        """The ids of the ticks it holds, `size` at a time, as a rebuild tells its read models.

        From the tick index, which lists a tick in each member that holds some of it:
        a tick may come in two pages, and the read models' hooks take it twice alike.
        An archive without an index is read whole, its ticks at their first records.
        """
        sha = self.manifest.index_sha256
        if sha is None:
            streams: Iterable[str] = (
                record["stream_id"]
                for record in read_fields(self.folder)
                if record["stream_position"] == 1
            )
        else:
            streams = _index_streams(self.folder / INDEX_FILE, sha)
        page: set[str] = set()
        for stream in streams:
            page.add(stream.removeprefix(TICK_PREFIX))
            if len(page) == size:
                yield page
                page = set()
        if page:
            yield page


def _index_streams(index: Path, sha256: str) -> Iterator[str]:
    """The streams a data file's index names, member by member (checked by its sha256)."""
    _same_sha(index, sha256)
    with gzip.open(index, "rb") as members:
        for member in members:
            streams = member.rstrip(b"\n").partition(b"\t")[2]
            yield from streams.decode().split(" ")


def recorded_archives(store: EventStore, root: Path, since: date | None = None) -> list[Archive]:
    """Every archive an `ArchiveWritten` names (of days from `since`), found under `root`, verified.

    Raises ArchiveError naming the first that is missing, damaged or not the one recorded
    (its sha256 differs): a rebuild without it would quietly lose its events. A fold of
    recent windows asks only for their days, and verifies only those.
    """
    found = []
    for stored in store.read_stream(ARCHIVE_STREAM):
        if stored.type != ArchiveWritten.type:
            continue
        record = ArchiveWritten.model_validate({**stored.data, "event_id": stored.event_id})
        if since is not None and record.day < since:
            continue
        folder = day_folder(root, record.day)
        found.append(Archive(record.day, folder, verify_as_recorded(folder, record.sha256)))
    return found


def verify_as_recorded(folder: Path, sha256: str) -> Manifest:
    """`verify`, and the archive is the one recorded (its `ArchiveWritten` sha256)."""
    manifest = verify(folder)
    if manifest.sha256 != sha256:
        raise ArchiveError(
            f"archive {folder / EVENTS_FILE}: sha256 {manifest.sha256} is not the "
            f"{sha256} recorded when it was written"
        )
    return manifest
