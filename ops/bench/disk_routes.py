"""Which route halves the hot store's bytes per tick: measured on both backends before building it.

Issue 24 asks for at most half of 8.9 KB a tick (4.45 KB). RESULTS ("Disk per tick with
transcripts in their own compact form") names two routes; this applies each one to a copy
of the same store, loaded as `growth_bench.py` loads it (transcripts compacted, read
models folded by `projections rebuild`), and prints every table and index per tick:

- **as loaded**: the layout of main;
- **(a) lean JSON**: every event's data without nulls, fields at their defaults, its
  event id and, in a tick stream, the `tick_id` and `level` the stream already names
  (what a parse would fill back), transcripts' rows re-encoded alike;
- **(a) without recorded_at**: and without the `recorded_at` index (`--since`'s);
- **(b) tick rows**: each closed tick's whole stream (its hot events and its compacted
  transcript) as one zlib-compressed row keyed by tick, with its first and last position
  (what a read of a window of positions would look up by), the events and `transcripts`
  rows gone; PostgreSQL keeps the ids in `event_ids` (the uniqueness a late spool replay
  needs), SQLite would check a compacted stream's blob;
- **(a)+(b)**: tick rows of lean JSON;
- **(b) lossless**: tick rows in an encoding of the store's own that gives every record
  back as stored (no reader changes): `tick_id`/`level` once a row, zlib with a preset
  dictionary of the event types' field names.

Every variant is measured packed (SQLite VACUUM; PostgreSQL VACUUM FULL), "as loaded" also
unpacked, so the routes compare bytes, not free space. The read models (`ticks`,
`tick_spend`, …) do not change with the route and are printed apart.

    .venv/bin/python ops/bench/disk_routes.py [--events 300000] [--backends sqlite,postgresql]
        [--pg-url postgresql://postgres@127.0.0.1:5432/test] [--pg-database bench_disk_routes]
        [--only TEXT]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
import psycopg
from growth_bench import cli, fresh_store, write_config
from history_loader import TOOL_TICKS, Span, _dsn, load
from machine import describe
from sqlalchemy.engine import make_url

from harness.contracts.events import EVENT_TYPES, TERMINAL_TYPES, Event, decode
from harness.contracts.records import StoredEvent

LOG_TABLES = ("events", "event_ids", "tick_streams", "transcripts", "tick_rows")
"""What a route changes (name prefixes of the tables and their indexes); the rest (read
models, checkpoints) it leaves alone."""
LOG = "the log (events, ids, transcripts, tick rows)"


def lean(type_: str, version: int, data: dict[str, Any], tick_stream: bool) -> dict[str, Any]:
    """Route (a): the data a parse restores whole, without what it would fill back."""
    event = decode(StoredEvent(0, UUID(int=0), "", 0, type_, version, data, {}, datetime.now(UTC)))
    if not isinstance(event, Event):
        return data
    drop = {"event_id", "tick_id", "level"} if tick_stream else {"event_id"}
    return event.model_dump(mode="json", exclude_none=True, exclude_defaults=True, exclude=drop)


# --- one connection API over both backends --------------------------------------------


class Store:
    """A copy of the loaded store, changed in place by a route and then measured."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite")
        if self.sqlite:
            self.conn: Any = sqlite3.connect(make_url(url).database or "")
        else:
            self.conn = psycopg.connect(_dsn(url), autocommit=True)

    def q(self, sql: str, params: Any = ()) -> list[Any]:
        sql = sql if self.sqlite else sql.replace("?", "%s")
        cursor = self.conn.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []

    def many(self, sql: str, rows: list[Any]) -> None:
        if self.sqlite:
            self.conn.executemany(sql, rows)
            self.conn.commit()
        else:
            with self.conn.cursor() as cursor:
                cursor.executemany(sql.replace("?", "%s"), rows)

    def pack(self, page_size: int | None = None) -> None:
        """Rewrite the store without free space; SQLite: in pages of `page_size` if given.

        A SQLite row that does not fit a page's free space starts a new page: 4 KiB pages
        hold two 1.4 KB compressed transcripts and one 2.8 KB tick row, the rest wasted.
        """
        if not self.sqlite:
            self.q("VACUUM FULL")
            return
        self.conn.commit()
        if page_size is not None:  # a WAL database keeps its page size through VACUUM
            self.q("PRAGMA journal_mode = DELETE")
            self.q(f"PRAGMA page_size = {page_size}")
        self.q("VACUUM")

    def sizes(self) -> dict[str, int]:
        """Bytes of each table and index (PostgreSQL: a table with its TOAST)."""
        if self.sqlite:
            return dict(self.q("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"))
        return dict(
            self.q(
                "SELECT relname, pg_relation_size(oid) + "
                "coalesce(pg_relation_size(nullif(reltoastrelid, 0)), 0) FROM pg_class "
                "WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'i')"
            )
        )

    def close(self) -> None:
        self.conn.close()


@contextmanager
def copy_of(url: str, root: Path, name: str, admin: str) -> Iterator[Store]:
    """A copy of the loaded store to change: a file copy, or a database made from a template."""
    if url.startswith("sqlite"):
        target = root / f"{name}.db"
        # The backup API copies what the WAL holds too (the read models a rebuild wrote).
        with (
            sqlite3.connect(make_url(url).database or "") as source,
            sqlite3.connect(target) as copy,
        ):
            source.backup(copy)
        copied = f"sqlite:///{target}"
    else:
        template = make_url(url).database
        with psycopg.connect(_dsn(admin), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{template}_{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{template}_{name}" TEMPLATE "{template}"')
        copied = make_url(url).set(database=f"{template}_{name}").render_as_string(False)
    store = Store(copied)
    try:
        yield store
    finally:
        store.close()
        if not url.startswith("sqlite"):
            with psycopg.connect(_dsn(admin), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{template}_{name}" WITH (FORCE)')


# --- the routes -----------------------------------------------------------------------


def _records(store: Store) -> Iterator[tuple[Any, ...]]:
    """Every stored event: position, id, stream, stream position, type, version, data, meta, at."""
    for row in store.q(
        "SELECT global_position, event_id, stream_id, stream_position, type, version, data, "
        "metadata, recorded_at FROM events"
    ):
        data, meta = (orjson.loads(v) if isinstance(v, str) else v for v in row[6:8])
        yield (*row[:6], data, meta, str(row[8]))


def _transcripts(store: Store) -> dict[str, list[list[Any]]]:
    """Compacted transcripts by tick: the records `harness.store.transcripts.encode` wrote."""
    return {
        tick: orjson.loads(zlib.decompress(bytes(blob)))
        for tick, blob in store.q("SELECT tick_id, data FROM transcripts WHERE data IS NOT NULL")
    }


def route_lean(store: Store) -> None:
    """(a): every event's data, and every compacted transcript's, without what parses restore."""
    rows = [
        (orjson.dumps(lean(t, v, d, s.startswith("tick-"))).decode(), p)
        for p, _, s, _, t, v, d, _, _ in _records(store)
    ]
    store.many("UPDATE events SET data = ? WHERE global_position = ?", rows)
    blobs = []
    for tick, records in _transcripts(store).items():
        for record in records:
            record[4] = lean("TranscriptEntry", record[3], record[4], True)
        blobs.append((zlib.compress(orjson.dumps(records), 6), tick))
    store.many("UPDATE transcripts SET data = ? WHERE tick_id = ?", blobs)


def lean_without_recorded_at(store: Store) -> None:
    """(a), and no `recorded_at` index: one index entry less per event."""
    route_lean(store)
    store.q("DROP INDEX ix_events_recorded_at")


def preset() -> bytes:
    """A zlib preset dictionary: every event type's name and its fields as JSON keys.

    Built from the event classes, not from the data measured. A tick's row is a few KB:
    without a dictionary, zlib spends most of it on the first spelling of each key.
    """
    shapes = [
        orjson.dumps({"type": cls.type, **{name: None for name in cls.model_fields}})
        for cls in EVENT_TYPES.values()
    ]
    return b"".join(shapes)[-32_768:]


def compress(records: list[list[Any]], dictionary: bytes | None) -> bytes:
    if dictionary is None:
        return zlib.compress(orjson.dumps(records), 6)
    packer = zlib.compressobj(6, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, dictionary)
    return packer.compress(orjson.dumps(records)) + packer.flush()


def route_tick_rows(store: Store, lean_json: bool = False, lossless: bool = False) -> None:
    """(b): each closed tick's stream as one compressed row; its events and transcript row go.

    `lossless`: the store's own encoding, every record given back as stored: `tick_id` and
    `level` said once for the row (a decoder puts them back), a preset dictionary.
    """
    streams: dict[str, list[list[Any]]] = {}
    closed: set[str] = set()
    for p, i, s, n, t, v, d, m, at in _records(store):
        if not s.startswith("tick-"):
            continue
        if t in TERMINAL_TYPES:
            closed.add(s)
        data = lean(t, v, d, True) if lean_json else d
        if lossless:
            data = {k: v for k, v in d.items() if k not in ("tick_id", "level")}
        streams.setdefault(s, []).append([p, str(i), n, t, v, data, m, at])
    for tick, records in _transcripts(store).items():
        for p, i, n, v, d, m, at in records:
            data = lean("TranscriptEntry", v, d, True) if lean_json else d
            if lossless:
                data = {k: v for k, v in d.items() if k not in ("tick_id", "level")}
            streams.setdefault(f"tick-{tick}", []).append(
                [p, i, n, "TranscriptEntry", v, data, m, at]
            )
    blob = "BLOB" if store.sqlite else "bytea"
    store.q(
        f"CREATE TABLE tick_rows (tick_id varchar(255) PRIMARY KEY, first_position bigint "
        f"NOT NULL, last_position bigint NOT NULL, data {blob} NOT NULL)"
    )
    store.q("CREATE INDEX ix_tick_rows_first ON tick_rows (first_position)")
    dictionary = preset() if lossless else None
    rows = []
    for stream in sorted(closed, key=lambda s: min(r[0] for r in streams[s])):
        records = sorted(streams[stream], key=lambda r: r[2])
        positions = [r[0] for r in records]
        data = compress(records, dictionary)
        rows.append((stream.removeprefix("tick-"), min(positions), max(positions), data))
    store.many("INSERT INTO tick_rows VALUES (?, ?, ?, ?)", rows)
    gone = [(s,) for s in closed]
    store.many("DELETE FROM events WHERE stream_id = ?", gone)
    store.many("DELETE FROM transcripts WHERE tick_id = ?", [(s[5:],) for (s,) in gone])
    if not store.sqlite:  # a closed tick's stream day is not looked up again
        store.many("DELETE FROM tick_streams WHERE stream_id = ?", gone)


ROUTES: list[tuple[str, Callable[[Store], None] | None]] = [
    ("as loaded, packed", None),
    ("as loaded, 16 KiB pages", None),
    ("(a) lean JSON", route_lean),
    ("(a) without the recorded_at index", lean_without_recorded_at),
    ("(b) tick rows", route_tick_rows),
    ("(a)+(b) tick rows of lean JSON", lambda s: route_tick_rows(s, lean_json=True)),
    ("(b) tick rows, lossless encoding", lambda s: route_tick_rows(s, lossless=True)),
    ("(b) tick rows, 16 KiB pages", route_tick_rows),
    ("(b) tick rows, lossless encoding, 16 KiB pages", lambda s: route_tick_rows(s, lossless=True)),
]
LARGE_PAGES = 16_384
"""SQLite's page size in the routes so named (its default is 4,096); PostgreSQL's is fixed."""


# --- report ---------------------------------------------------------------------------


def per_tick(sizes: dict[str, int], ticks: int) -> tuple[float, float, dict[str, float]]:
    """KB a tick of the log and of the read models, and B a tick of each relation."""
    shown = {name: size / ticks for name, size in sizes.items() if size / ticks >= 1}
    log = sum(v for k, v in shown.items() if _bare(k).startswith(LOG_TABLES))
    return log / 1000, (sum(shown.values()) - log) / 1000, shown


def _bare(name: str) -> str:
    """An index's table name first: `sqlite_autoindex_events_1`, `ix_events_…` → `events…`."""
    for prefix in ("sqlite_autoindex_", "ix_", "uq_"):
        name = name.removeprefix(prefix)
    return name


def measure(url: str, events: int, root: Path, admin: str, only: str) -> None:
    now = datetime.now(UTC)
    began, cpu = time.perf_counter(), time.process_time()
    stored = sum(load(url, Span.of_events(events, now), True))
    cli(write_config(root, url), "projections", "rebuild")()
    ticks = round(events / (11 + 4 * TOOL_TICKS))
    print(
        f"  {stored:,} events stored, {ticks:,} ticks, loaded and folded in "
        f"{time.perf_counter() - began:.0f} s (this process's CPU: "
        f"{time.process_time() - cpu:.0f} s)",
        flush=True,
    )
    loaded = Store(url)
    log, models, _ = per_tick(loaded.sizes(), ticks)
    loaded.close()
    print(f"  {'as loaded (unpacked)':<36}{LOG}: {log:5.2f} KB/tick   read models: {models:4.2f}")
    for name, route in ROUTES:
        if only not in name or ("16 KiB" in name and not url.startswith("sqlite")):
            continue
        with copy_of(url, root, f"r{ROUTES.index((name, route))}", admin) as store:
            began, cpu = time.perf_counter(), time.process_time()
            if route is not None:
                route(store)
            store.pack(LARGE_PAGES if "16 KiB" in name else None)
            log, models, shown = per_tick(store.sizes(), ticks)
            print(
                f"  {name:<36}{LOG}: {log:5.2f} KB/tick   read models: {models:4.2f}   "
                f"total {log + models:5.2f}   ({time.perf_counter() - began:.0f} s)",
                flush=True,
            )
            for relation, size in sorted(shown.items(), key=lambda kv: -kv[1]):
                print(f"      {relation:<44}{size:>8,.0f} B")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--pg-database", default="bench_disk_routes")
    parser.add_argument("--only", default="", help="the routes whose name holds this text")
    args = parser.parse_args()
    print(describe())
    print(f"load average at start: {os.getloadavg()}")
    for backend in args.backends.split(","):
        print(f"\n{backend}, {args.events:,} events:", flush=True)
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            url = fresh_store(backend, root, args.pg_url, args.pg_database)
            measure(url, args.events, root, args.pg_url, args.only)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
