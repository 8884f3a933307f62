"""The schema exists only through Alembic, and the code's tables match it exactly."""

from __future__ import annotations

import importlib
import pkgutil
import re
from contextlib import closing, nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import uuid4

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

import harness.projections
import harness.store
import migrations
from harness.contracts import StoredEvent
from harness.contracts.events import (
    BudgetSpent,
    LevelPaused,
    TickCompleted,
    TickScheduled,
    TickStarted,
    ToolCalled,
    TranscriptEntry,
)
from harness.folds.packed import pack
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.projections.tick_counts import TABLES as COUNTERS
from harness.projections.ticks import ticks
from harness.store import (
    HEAD_REVISION,
    NewEvent,
    SchemaError,
    SqlEventStore,
    migrate_store,
    open_store,
)
from harness.store.engine import create_store_engine
from harness.store.migrate import SCRIPT_LOCATION, current_revision, downgrade, upgrade
from harness.store.schema import events, metadata, postgres_only, tick_rows
from harness.store.tick_rows import compact, unpack
from harness.timespec import as_utc
from migrations import packing
from tests.conftest import fresh_pg_database
from tests.procs import open_fresh, racing

for _package in (harness.store, harness.projections):
    # Each module defines its tables on `metadata` when it is imported, and the fronts
    # import lazily: the schema the code defines is every module's.
    for _module in pkgutil.iter_modules(_package.__path__):
        importlib.import_module(f"{_package.__name__}.{_module.name}")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite store not yet created: these tests migrate it (conftest's is migrated)."""
    return f"sqlite:///{tmp_path}/events.db"


def test_head_revision_constant_matches_alembic() -> None:
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    assert ScriptDirectory.from_config(config).get_current_head() == HEAD_REVISION
    assert Path(ScriptDirectory.from_config(config).dir) == Path(migrations.__file__).parent


def test_the_migrations_copy_of_the_packed_format_writes_and_reads_the_stores_bytes() -> None:
    """0020 and 0023 pack and unpack tick rows with their own copy of format 1."""
    at = datetime(2026, 12, 1, 12, 30, 15, 123456, tzinfo=UTC)
    events = [
        TickScheduled(tick_id="t", level="min"),
        BudgetSpent(tick_id="t", level="min", model="m", prompt_tokens=3, completion_tokens=4),
        TickCompleted(tick_id="t", level="min"),
    ]
    records = [
        StoredEvent(7 + n, uuid4(), "tick-t", n + 1, new.type, 1, new.data, {"host": "h"}, at)
        for n, new in enumerate(event.to_record() for event in events)
    ]
    theirs = [packing.Record(**record.as_dict()) for record in records]
    blob, count = pack("t", records)
    assert packing.pack("t", theirs) == (blob, count) == (blob, 3)
    assert [record.as_row() for record in packing.unpack("t", blob)] == [
        record.as_dict() for record in unpack("t", blob)
    ]
    with pytest.raises(ValueError, match="unknown format"):
        packing.unpack("t", b"\x02" + blob[1:])


PARTITION = re.compile(r"^(events_(hot|default|\d{8})|tick_rows_(default|\d{8}))$")


def _postgres_layout() -> sa.MetaData:
    """The code's tables as PostgreSQL keeps them (0010, 0027).

    `events` is partitioned by `tick_day`, its unique keys hold it, the id's and tick
    streams' tables stand beside it; `tick_rows` is partitioned by `day`, which its
    unique keys hold. Their partitions copy them.
    """
    layout = sa.MetaData()
    for table in metadata.tables.values():
        if table.name not in ("events", "tick_rows"):
            table.to_metadata(layout)
    sa.Table(
        "tick_rows",
        layout,
        *(
            sa.Column(
                c.name,
                c.type,
                nullable=c.nullable,
                primary_key=c.name in ("first_position", "day"),
                autoincrement=False,
            )
            for c in tick_rows.columns
        ),
        sa.Index("ix_tick_rows_span", sa.text("(last_position - first_position)")),
        sa.Index("ix_tick_rows_last_recorded", "last_recorded"),
        sa.Index("ix_tick_rows_day", "day"),
        sa.Index("ix_tick_rows_tick_id", "tick_id", "day", unique=True),
        sa.Index(
            "ix_tick_rows_transcripts",
            "day",
            "tick_id",
            postgresql_where=sa.text("transcript > 0"),
        ),
    )
    for table in postgres_only.tables.values():
        table.to_metadata(layout)
    sa.Table(
        "events",
        layout,
        *(sa.Column(c.name, c.type, nullable=False) for c in events.columns),
        sa.Column("tick_day", sa.Date()),
        sa.UniqueConstraint(
            "global_position", "tick_day", name="events_pkey", postgresql_nulls_not_distinct=True
        ),
        sa.UniqueConstraint(
            "stream_id",
            "stream_position",
            "tick_day",
            name="uq_events_stream_position",
            postgresql_nulls_not_distinct=True,
        ),
        sa.Index("ix_events_recorded_at", "recorded_at"),
    )
    return layout


def _check_schema(url: str) -> None:
    engine = create_store_engine(url)
    upgrade(engine)
    assert current_revision(engine) == HEAD_REVISION
    postgres = engine.dialect.name == "postgresql"
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "include_name": lambda name, kind, _: (
                    kind != "table" or not PARTITION.match(name or "")
                )
            },
        )
        differences = compare_metadata(context, _postgres_layout() if postgres else metadata)
    assert differences == []
    downgrade(engine, "base")
    assert current_revision(engine) is None
    upgrade(engine)
    assert current_revision(engine) == HEAD_REVISION
    engine.dispose()


def test_sqlite_schema_matches_the_code_and_round_trips(sqlite_url: str) -> None:
    _check_schema(sqlite_url)


def test_postgres_schema_matches_the_code_and_round_trips() -> None:
    with fresh_pg_database() as url:
        _check_schema(url)


def test_postgres_is_migrated_only_on_purpose() -> None:
    with fresh_pg_database() as url:
        with pytest.raises(SchemaError, match="tickwork migrate"):
            open_store(url)
        assert migrate_store(url) is None
        open_store(url).close()


def test_processes_opening_a_new_sqlite_store_at_once_all_succeed(sqlite_url: str) -> None:
    with racing(open_fresh, *[(sqlite_url,)] * 4):
        pass
    store = open_store(sqlite_url)
    assert len(store.read_stream("opened")) == 4
    store.close()


def test_postgres_events_from_before_0005_stay_below_every_new_position() -> None:
    """Sequence positions (1, 2 …) stay first in the log; new ones follow the xid."""
    with fresh_pg_database() as url:
        engine = create_store_engine(url)
        upgrade(engine, "0004")
        with engine.begin() as conn:
            for n in range(3):  # as 0004's writer stored them: the sequence's positions
                conn.execute(
                    sa.text(
                        "INSERT INTO events (event_id, stream_id, stream_position, type, "
                        "version, data, metadata, recorded_at) "
                        "VALUES (:id, 'old', :n, 'Thing', 1, '{}', '{}', now())"
                    ),
                    {"id": uuid4(), "n": n + 1},
                )
        upgrade(engine)
        engine.dispose()
        store = open_store(url)
        (new,) = store.append("new", [NewEvent(uuid4(), "Thing", 1, {})]).positions
        assert [e.global_position for e in store.read_all()] == [1, 2, 3, new]
        assert store.last_position() == new
        store.close()


def _counters_survive_an_upgrade(url: str) -> None:
    """0007 fills the ticks projection's new counters from its rows, as its fold would."""
    engine = create_store_engine(url)
    upgrade(engine)
    store = open_store(url)
    at = datetime(2026, 11, 30, 12, tzinfo=UTC)
    for tick_id, level, seconds in (("t1", "min", 3), ("t2", "min", 90), ("t3", "hour", 4000)):
        store.append(
            f"tick-{tick_id}",
            [
                TickStarted(
                    tick_id=tick_id, level=level, pid=1, host="h", occurred_at=at
                ).to_record(),
                ToolCalled(tick_id=tick_id, level=level, name="x", status="cancelled").to_record(),
                TickCompleted(
                    tick_id=tick_id, level=level, occurred_at=at + timedelta(seconds=seconds)
                ).to_record(),
            ],
        )
    store.append("tick-t4", [TickScheduled(tick_id="t4", level="min", slot=at).to_record()])
    projector_for(store, PriceBook()).catch_up()

    def counters() -> dict[str, list[tuple[object, ...]]]:
        with store.read_transaction() as conn:
            return {t.name: sorted(tuple(r) for r in conn.execute(sa.select(t))) for t in COUNTERS}

    folded = counters()
    assert folded["tick_duration_buckets"] == [("min", 5000, 1), ("min", 120_000, 1)]
    downgrade(engine, "0005")
    upgrade(engine)
    assert counters() == folded
    store.close()
    engine.dispose()


def test_sqlite_upgrade_fills_the_tick_counters(sqlite_url: str) -> None:
    _counters_survive_an_upgrade(sqlite_url)


def test_postgres_upgrade_fills_the_tick_counters() -> None:
    with fresh_pg_database() as url:
        _counters_survive_an_upgrade(url)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_0006_dates_existing_ticks_as_a_rebuild_would(backend: str, sqlite_url: str) -> None:
    """A tick's list time from its times; one known only from its spend, from that spend."""
    with nullcontext(sqlite_url) if backend == "sqlite" else fresh_pg_database() as url:
        engine = create_store_engine(url)
        upgrade(engine, "0005")
        engine.dispose()
        spend = BudgetSpent(
            tick_id="spent", level="min", model="m", prompt_tokens=1, completion_tokens=1
        )
        scheduled = TickScheduled(tick_id="sched", level="min")
        with closing(SqlEventStore(engine := create_store_engine(url))) as store:
            with store.write_transaction() as conn:  # as 0005's writer stored them
                for position, event in enumerate((scheduled, spend), 1):
                    record = event.to_record()
                    conn.execute(
                        events.insert().values(
                            global_position=position,
                            event_id=record.event_id,
                            stream_id=event.stream_id,
                            stream_position=1,
                            type=record.type,
                            version=record.version,
                            data=record.data,
                            metadata=record.metadata,
                            recorded_at=datetime.now(UTC),
                        )
                    )
            with store.write_transaction() as conn:  # the rows 0005's projection folded
                for tick_id, at in (("sched", scheduled.occurred_at), ("spent", None)):
                    conn.execute(
                        sa.text(
                            "INSERT INTO ticks VALUES (:id, 'min', 'scheduled', NULL, :at, "
                            "NULL, NULL, 1, 1, 1, 0, 0, 0, NULL, NULL)"
                        ).bindparams(sa.bindparam("at", type_=sa.DateTime(timezone=True))),
                        {"id": tick_id, "at": at},
                    )
            upgrade(engine)
        with closing(open_store(url)) as store:
            migrated = _list_times(store)
            assert migrated["spent"] == spend.occurred_at
            projector_for(store, PriceBook()).rebuild("ticks")
            assert _list_times(store) == migrated


def _list_times(store: SqlEventStore) -> dict[str, datetime]:
    with store.read_transaction() as conn:
        return {
            t: as_utc(at) for t, at in conn.execute(sa.select(ticks.c.tick_id, ticks.c.sort_at))
        }


SPEND_ROW = "'min', 'm', '2026-11-30', 0, 100, 10, 0, 0, 1, 0"


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize(
    ("before", "after", "column", "row", "sums", "filled"),
    [
        ("0008", "0009", "template_hash", SPEND_ROW, "", ""),
        ("0028", "0029", "target", f"{SPEND_ROW}, ''", "", ""),
        ("0030", "0031", "price_source", f"{SPEND_ROW}, '', ''", ", 0, 0, 0", ""),
        ("0032", "0033", "billing", f"{SPEND_ROW}, '', '', '', 0, 0, 7", "", "api"),
    ],
)
def test_a_column_joining_the_spend_key_is_filled_as_a_rebuild_would_and_a_downgrade_adds_it_up(
    backend: str,
    before: str,
    after: str,
    column: str,
    row: str,
    sums: str,
    filled: str,
    sqlite_url: str,
) -> None:
    """Spend folded before a key column joined has what a rebuild of its events gives.

    No template (0009), no target (0029), no booked price source (0031): ""; billed on
    `api` (0033), as all spend was before billing was recorded. `sums`: the values of the
    sums a revision adds after the column.
    """
    with nullcontext(sqlite_url) if backend == "sqlite" else fresh_pg_database() as url:
        engine = create_store_engine(url)
        upgrade(engine, before)
        with engine.begin() as conn:
            conn.execute(sa.text(f"INSERT INTO spend_daily VALUES ({row})"))
        upgrade(engine, after)
        with engine.begin() as conn:
            assert conn.execute(sa.text(f"SELECT {column} FROM spend_daily")).all() == [(filled,)]
            conn.execute(sa.text(f"INSERT INTO spend_daily VALUES ({row}, 'abc'{sums})"))
        downgrade(engine, before)
        with engine.connect() as conn:
            sums = "SELECT level, prompt_tokens, model_calls FROM spend_daily"
            assert conn.execute(sa.text(sums)).all() == [("min", 200, 2)]
        engine.dispose()


def test_0010_moves_a_populated_postgres_store_into_day_partitions() -> None:
    """Every event kept, in order, each tick stream in the day it began, others hot.

    Ids still refuse a retry; a stream begun before the upgrade goes on in its day.
    """
    day = datetime(2026, 11, 29, 23, 59, tzinfo=UTC)
    rows = [  # stream, position, recorded_at: a tick crossing midnight, one the next day
        ("tick-late", 1, day),
        ("level-min", 1, day),
        ("tick-next", 1, day + timedelta(hours=5)),
        ("tick-late", 2, day + timedelta(minutes=2)),
        ("control", 1, day + timedelta(hours=6)),
    ]
    with fresh_pg_database() as url:
        engine = create_store_engine(url)
        upgrade(engine, "0009")
        with engine.begin() as conn:
            for position, (stream, at_position, at) in enumerate(rows, 1):
                conn.execute(
                    events.insert().values(
                        global_position=position,
                        event_id=uuid4(),
                        stream_id=stream,
                        stream_position=at_position,
                        type="Thing",
                        version=1,
                        data={"n": position},
                        metadata={},
                        recorded_at=at,
                    )
                )
        before = _stored_rows(engine)
        upgrade(engine)
        assert _stored_rows(engine) == before
        with engine.connect() as conn:
            homes = dict(
                conn.execute(
                    sa.text("SELECT global_position, tableoid::regclass::text FROM events")
                ).all()
            )
            ids = conn.execute(sa.text("SELECT count(*) FROM event_ids")).scalar_one()
        assert homes == {
            1: "events_20261129",
            2: "events_hot",
            3: "events_20261130",
            4: "events_20261129",
            5: "events_hot",
        }
        assert ids == len(rows)
        engine.dispose()
        with closing(open_store(url)) as store:
            retried = NewEvent(before[0][1], "Thing", 1, {"n": 1})
            assert store.append("tick-late", [retried]).duplicate
            (went_on,) = store.append("tick-late", [NewEvent(uuid4(), "Thing", 1, {})]).positions
            assert [e.stream_position for e in store.read_stream("tick-late")] == [1, 2, 3]
            assert [e.global_position for e in store.read_all()] == [1, 2, 3, 4, 5, went_on]
            with store.read_transaction() as conn:
                home = conn.execute(
                    sa.text(
                        "SELECT tableoid::regclass::text FROM events WHERE global_position = :p"
                    ),
                    {"p": went_on},
                ).scalar_one()
            assert home == "events_20261129"
        engine = create_store_engine(url)
        downgrade(engine, "0009")
        assert _stored_rows(engine)[: len(rows)] == before
        engine.dispose()


def _stored_rows(engine: sa.Engine) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [
            tuple(row)
            for row in conn.execute(
                sa.text(
                    "SELECT global_position, event_id, stream_id, stream_position, type, "
                    "version, data::text, metadata::text, recorded_at FROM events "
                    "ORDER BY global_position"
                )
            )
        ]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_0012_downgrade_puts_compacted_transcripts_back_into_events(
    backend: str, sqlite_url: str
) -> None:
    """Nothing compacted is lost back: the entries return with their ids and positions."""
    with nullcontext(sqlite_url) if backend == "sqlite" else fresh_pg_database() as url:
        migrate_store(url)
        store = open_store(url)
        said = TranscriptEntry(tick_id="t", level="min", kind="assistant", text="done")
        store.append("tick-t", [TickScheduled(tick_id="t", level="min").to_record()])
        position = store.append("tick-t", [said.to_record()]).positions[0]
        store.append("tick-t", [TickCompleted(tick_id="t", level="min").to_record()])
        store.append("level-min", [LevelPaused(level="min", reason="the log's last").to_record()])
        before = store.read_stream("tick-t")
        assert compact(store) == 1
        store.close()
        engine = create_store_engine(url)
        downgrade(engine, "0011")
        with engine.connect() as conn:
            query = "SELECT global_position, event_id, stream_position FROM events WHERE type = :t"
            back = conn.execute(sa.text(query), {"t": "TranscriptEntry"}).one()
        engine.dispose()
        assert back[0] == position and str(back[1]).replace("-", "") == said.event_id.hex
        assert back[2] == 2
        engine = create_store_engine(url)
        upgrade(engine)
        engine.dispose()
        store = open_store(url)
        assert store.read_stream("tick-t") == before
        store.close()


def _one_tick_packed(url: str) -> list[StoredEvent]:
    """A store at head holding one closed tick, packed, and a level's event after it."""
    migrate_store(url)
    with closing(open_store(url)) as store:
        store.append("tick-t", [TickScheduled(tick_id="t", level="min").to_record()])
        store.append("tick-t", [TickCompleted(tick_id="t", level="min").to_record()])
        store.append("level-min", [LevelPaused(level="min", reason="last").to_record()])
        packed = store.read_stream("tick-t")
        assert compact(store) == 1
    return packed


def test_0023_takes_packed_ids_out_of_event_ids_and_a_downgrade_puts_them_back() -> None:
    """PostgreSQL: code of 0022 relies on `event_ids` to refuse a packed record's replay."""
    with fresh_pg_database() as url:
        packed = _one_tick_packed(url)
        engine = create_store_engine(url)
        held = sa.text("SELECT count(*) FROM event_ids WHERE event_id = ANY(:ids)")
        ids = {"ids": [e.event_id for e in packed]}
        counts = []
        for step in (lambda: None, lambda: downgrade(engine, "0022"), lambda: upgrade(engine)):
            step()
            with engine.connect() as conn:
                counts.append(conn.execute(held, ids).scalar_one())
        engine.dispose()
        assert counts == [0, len(packed), 0]
        with closing(open_store(url)) as store:
            replay = NewEvent(packed[0].event_id, packed[0].type, 1, packed[0].data)
            assert store.append("tick-t", [replay]).duplicate


def test_0027_moves_packed_rows_into_their_days_partitions_and_a_downgrade_back() -> None:
    """PostgreSQL: every row lands in its day's partition of `tick_rows`, and back out."""
    with fresh_pg_database() as url:
        packed = _one_tick_packed(url)
        engine = create_store_engine(url)
        rows = sa.text("SELECT tableoid::regclass::text, tick_id, day FROM tick_rows")
        found = []
        for step in (lambda: downgrade(engine, "0026"), lambda: upgrade(engine)):
            step()
            with engine.connect() as conn:
                found.append([tuple(row) for row in conn.execute(rows)])
        engine.dispose()
        day = packed[0].recorded_at.date()
        assert found == [[("tick_rows", "t", day)], [(f"tick_rows_{day:%Y%m%d}", "t", day)]]
        with closing(open_store(url)) as store:
            assert store.read_stream("tick-t") == packed
