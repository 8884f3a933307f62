"""Transcripts in their compact form: the log reads the same and every read model rebuilds equal.

A closed tick's `TranscriptEntry` events leave `events` for one compressed row; every
reader of a stream gets them back in place, a rebuild of every read model from zero
equals the incremental one, and an entry replayed after its tick was compacted (a late
spool) is read once.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from harness.contracts.events import TickScheduled, TranscriptEntry
from harness.devtools.soak import tick_events
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.store import NewEvent, SqlEventStore, open_store
from harness.store.schema import events, metadata, transcripts
from harness.store.transcripts import compact


def entry(tick_id: str, text: str) -> TranscriptEntry:
    return TranscriptEntry(tick_id=tick_id, level="min", kind="assistant", text=text)


def read_models(store: SqlEventStore) -> dict[str, list[tuple[Any, ...]]]:
    with store.read_transaction() as conn:
        return {
            table.name: sorted(tuple(row) for row in conn.execute(sa.select(table)))
            for table in metadata.sorted_tables
            if table.name not in ("events", "transcripts", "projection_checkpoints")
        }


def streams_with_entries(store: SqlEventStore) -> list[str]:
    """The streams whose transcript entries are still stored as events."""
    query = sa.select(events.c.stream_id).where(events.c.type == TranscriptEntry.type)
    with store.read_transaction() as conn:
        return list(conn.execute(query).scalars())


def test_compacted_transcripts_read_in_place_and_rebuilds_equal(
    store_url: str, tmp_path: Path
) -> None:
    store = open_store(store_url)
    try:
        streams = [f"tick-t{n}" for n in range(4)]
        for n, stream in enumerate(streams):
            *running, ended = tick_events(f"t{n}", tmp_path, 100 + n, datetime.now(UTC).date())
            store.append(stream, [e.to_record() for e in running])
            store.append(stream, [entry(f"t{n}", f"answer {n} " * 200).to_record()])
            store.append(stream, [ended.to_record()])
        store.append("tick-open", [TickScheduled(tick_id="open", level="min").to_record()])
        store.append("tick-open", [entry("open", "still going").to_record()])
        projector = projector_for(store, PriceBook())
        projector.catch_up()
        before = {stream: store.read_stream(stream) for stream in [*streams, "tick-open"]}
        models = read_models(store)

        assert compact(store) == 4
        assert streams_with_entries(store) == ["tick-open"], (
            "a running tick keeps its entries as events"
        )
        assert compact(store) == 0, "a second pass finds nothing new"
        for stream, found in before.items():
            assert store.read_stream(stream) == found
            assert store.read_stream(stream, after=2, limit=3) == found[2:5]
        assert store.read_streams(streams) == {s: before[s] for s in streams}
        typed = store.read_streams(streams[:1], types=["TranscriptEntry"])
        assert [e.data["text"] for e in typed[streams[0]]] == ["answer 0 " * 200]
        for name in projector.projections:
            projector.rebuild(name)
        assert read_models(store) == models, "a rebuild from zero equals the incremental one"

        compacted = next(e for e in before[streams[0]] if e.type == "TranscriptEntry")
        late = entry("t0", "replayed late")
        again = NewEvent(compacted.event_id, compacted.type, 1, compacted.data)
        store.append(streams[0], [late.to_record(), again])
        entries = [e for e in store.read_stream(streams[0]) if e.type == "TranscriptEntry"]
        assert [e.data["text"] for e in entries] == ["answer 0 " * 200, "replayed late"]
        with store.read_transaction() as conn:
            rows = conn.execute(sa.select(sa.func.count()).select_from(transcripts)).scalar()
        assert rows == 4
    finally:
        store.close()
