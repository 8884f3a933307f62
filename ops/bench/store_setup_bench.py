"""What a test pays for an empty store: SQLite migrated or copied, PostgreSQL emptied.

A new SQLite store, the suite fixtures' and `open_store`'s of a file not there yet, is a
copy of one migrated once per schema (`harness.store.scratch`); migrating each new file in
place, as every store was made before, is the anchor. The fixtures TRUNCATE PostgreSQL's
tables (DELETE, cheaper, leaves dead rows that change the plans tests/test_read_costs.py
counts); this prints what each costs a test. SQLite in CPU seconds of this process;
PostgreSQL in wall seconds, as most of its cost is the server's (new files for every
truncated table).

    .venv/bin/python ops/bench/store_setup_bench.py [--runs 10]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

from machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import sqlalchemy as sa

from harness.store import migrate_store, open_store
from harness.store.engine import create_store_engine
from harness.store.scratch import migrate_in_place
from tests.conftest import fresh_pg_database, store_relations
from tests.store_support import migrated_sqlite


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    print(describe())
    with tempfile.TemporaryDirectory() as tmp:
        kinds = ("migrated in place", "copied by open_store", "copied by the fixture")
        migrated_sqlite(Path(tmp) / "warm")  # the template, made once as the suite does
        for number, kind in enumerate(kinds):
            started = _cpu()
            for run in range(runs):
                folder = Path(tmp) / f"{number}-{run}"
                if kind == "copied by the fixture":
                    url = migrated_sqlite(folder)
                else:
                    folder.mkdir()
                    url = f"sqlite:///{folder}/e.db"
                    if kind == "migrated in place":
                        migrate_in_place(folder / "e.db")
                open_store(url).close()
            print(f"SQLite store {kind:>21}, opened: {(_cpu() - started) / runs:.3f} s CPU each")
    with fresh_pg_database() as url:
        migrate_store(url)
        engine = create_store_engine(url)
        with engine.begin() as conn:
            tables, _ = store_relations(conn)
        truncate = f"TRUNCATE {', '.join(tables)} RESTART IDENTITY"
        started = time.monotonic()
        for _ in range(runs):
            with engine.begin() as conn:
                conn.execute(sa.text(truncate))
        each = (time.monotonic() - started) / runs
        print(f"PostgreSQL TRUNCATE of {len(tables)} tables: {each:.3f} s wall each")
        started = time.monotonic()
        for _ in range(runs):
            with engine.begin() as conn:
                for table in tables:
                    conn.execute(sa.text(f"DELETE FROM {table}"))
        each = (time.monotonic() - started) / runs
        print(f"PostgreSQL DELETE of {len(tables)} tables: {each:.3f} s wall each")
        engine.dispose()


if __name__ == "__main__":
    main()
