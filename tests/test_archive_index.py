"""An archive's tick index: one tick is read back from the parts of the day that hold it.

`show --archive` of one tick must not inflate a day of 1.44M ticks: the data file is a run
of gzip members and the index names each member's ticks. Archives written before the
index (no `index_sha256` in their manifest) are still read, whole.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from uuid import UUID

import pytest

from harness.contracts.records import StoredEvent
from harness.store.archives import (
    EVENTS_FILE,
    INDEX_FILE,
    MANIFEST_FILE,
    MEMBER_LINES,
    Archive,
    ArchiveError,
    lines,
    read_events,
    read_stream,
    verify,
    write_archive,
)

DAY = date(2026, 10, 1)
PER_TICK = 10


def records(count: int) -> list[StoredEvent]:
    """`count` records of ticks of `PER_TICK` records each, a tick's records side by side."""
    at = datetime(2026, 10, 1, 12, tzinfo=UTC)
    return [
        StoredEvent(
            n,
            UUID(int=n),
            f"tick-t{(n - 1) // PER_TICK}",
            (n - 1) % PER_TICK + 1,
            "ToolCalled",
            1,
            {"tick_id": f"t{(n - 1) // PER_TICK}", "level": "min", "name": "shell"},
            {},
            at,
        )
        for n in range(1, count + 1)
    ]


def same(found: list[StoredEvent], wanted: list[StoredEvent]) -> bool:
    return [(e.global_position, e.event_id, e.data) for e in found] == [
        (e.global_position, e.event_id, e.data) for e in wanted
    ]


def test_a_tick_is_read_from_its_members_and_an_archive_without_index_whole(
    tmp_path: Path,
) -> None:
    written = records(MEMBER_LINES * 2 + MEMBER_LINES // 2)
    manifest = write_archive(tmp_path, DAY, lines(written))
    assert manifest.index_sha256 is not None and verify(tmp_path) == manifest
    assert same(list(read_events(tmp_path)), written), "one gzip stream to a whole reader"
    first, last = "tick-t3", f"tick-t{len(written) // PER_TICK - 1}"
    wanted = [e for e in written if e.stream_id == first]

    data = tmp_path / EVENTS_FILE
    whole = data.read_bytes()
    damaged = bytearray(whole)
    damaged[-200] ^= 0xFF  # inside the last member, far from the first tick's
    data.write_bytes(bytes(damaged))
    assert same(read_stream(tmp_path, first), wanted), "only the tick's member was read"
    with pytest.raises(ArchiveError, match=r"damaged member|cut short"):
        read_stream(tmp_path, last)
    with pytest.raises(ArchiveError, match="does not match the manifest"):
        verify(tmp_path)

    data.write_bytes(whole)
    older = json.loads((tmp_path / MANIFEST_FILE).read_text())
    del older["index_sha256"]
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(older))
    (tmp_path / INDEX_FILE).unlink()
    assert same(read_stream(tmp_path, first), wanted), "an archive without index, read whole"


def test_a_rebuild_hears_every_archived_tick_in_pages_from_the_index_or_the_whole_file(
    tmp_path: Path,
) -> None:
    written = records(MEMBER_LINES * 2 + MEMBER_LINES // 2 + 5)  # ticks across members
    manifest = write_archive(tmp_path, DAY, lines(written))
    ticks = {f"t{n}" for n in range(-(-len(written) // PER_TICK))}
    assert manifest.ticks == len(ticks), "each tick counted once, at its first record"
    archive = Archive(DAY, tmp_path, manifest)
    pages = list(archive.tick_pages(size=7))
    assert set().union(*pages) == ticks
    assert all(len(page) <= 7 for page in pages)

    older = Archive(DAY, tmp_path, manifest.model_copy(update={"index_sha256": None}))
    pages = list(older.tick_pages(size=7))
    assert set().union(*pages) == ticks and sum(map(len, pages)) == len(ticks)
