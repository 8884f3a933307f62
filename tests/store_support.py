"""Migrated, empty SQLite stores for tests, without paying Alembic in each test.

Migrating a new SQLite file costs 0.14 s of CPU or more; copying the store migrated once
per schema (`harness.store.scratch_sqlite`, the fork server's warm-up uses it too) costs
5 ms, and a suite opens hundreds. Only the tests' stores are copied: the code still
migrates every store it opens (a copy is at head, so it finds nothing to do), and
tests/test_migrations.py migrates stores of its own.
"""

from __future__ import annotations

from pathlib import Path

from harness.store import scratch_sqlite


def migrated_sqlite(folder: Path) -> str:
    """The URL of `folder`/events.db, made a migrated, empty store unless it is there.

    The folder and the file get the modes opening the store gives them (0700, 0600).
    """
    path = folder / "events.db"
    if not path.exists():
        scratch_sqlite(folder)
    return f"sqlite:///{path}"
