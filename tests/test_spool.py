"""The spool keeps events while the store is unreachable; ingestion never counts twice."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

from harness.store import NewEvent, Spool, SqlEventStore, append_or_spool, open_store
from harness.store.engine import create_store_engine
from tests.procs import racing, spool_many

DOWN = "postgresql://tickwork@127.0.0.1:1/down"


def event(**data: object) -> NewEvent:
    return NewEvent(uuid4(), "BudgetSpent", 1, dict(data))


def test_unreachable_store_spools_and_next_open_ingests(tmp_path: Path, sqlite_url: str) -> None:
    spool = Spool(tmp_path / "spool")
    spooled = [event(n=i) for i in range(3)]
    for item in spooled:
        assert isinstance(append_or_spool(None, spool, "tick-a", [item]), Path)
    assert spool.pending() == 3

    store = open_store(sqlite_url, spool=spool)
    assert [e.event_id for e in store.read_stream("tick-a")] == [e.event_id for e in spooled]
    assert spool.pending() == 0 and spool.files() == []
    store.close()


def test_append_or_spool_falls_back_when_postgres_is_down(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    down = SqlEventStore(create_store_engine(DOWN))
    where = append_or_spool(down, spool, "tick-b", [event(n=1)])
    assert isinstance(where, Path) and spool.pending() == 1


def test_replayed_lines_are_not_counted_twice(tmp_path: Path, store: SqlEventStore) -> None:
    spool = Spool(tmp_path / "spool")
    first = event(n=1)
    store.append("tick-a", [first])
    spool.write("tick-a", [first])
    spool.write("tick-a", [event(n=2)])

    report = spool.ingest(store)
    assert (report.appended, report.duplicates, report.files) == (1, 1, 1)
    assert spool.ingest(store).appended == 0
    assert [e.data["n"] for e in store.read_stream("tick-a")] == [1, 2]


def test_a_torn_line_is_kept_aside_not_dropped(tmp_path: Path, store: SqlEventStore) -> None:
    spool = Spool(tmp_path / "spool")
    path = spool.write("tick-a", [event(n=1)])
    with open(path, "ab") as handle:
        handle.write(b'{"stream_id": "tick-a", "eve')
    report = spool.ingest(store)
    assert (report.appended, report.corrupt_lines) == (1, 1)
    kept = path.with_suffix(".corrupt").read_bytes()
    assert b'"eve' in kept
    assert [e.data for e in store.read_all()] == [{"n": 1}]


def test_ingesting_while_another_process_spools_loses_nothing(
    tmp_path: Path, sqlite_url: str
) -> None:
    directory = tmp_path / "spool"
    spool = Spool(directory)
    store = open_store(sqlite_url)
    with racing(spool_many, (str(directory), 300)) as (writer,):
        while writer.is_alive():
            spool.ingest(store)
    spool.ingest(store)
    assert store.last_position() == 300
    assert sorted(e.data["i"] for e in store.read_all(limit=1000)) == list(range(300))
    store.close()
