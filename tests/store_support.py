"""Migrated, empty SQLite stores for tests, without paying Alembic in each test.

Migrating a new SQLite file (19 migrations) costs 0.14 s of CPU; copying a store migrated
once per test process costs 5 ms, and a suite opens hundreds. Only the tests' stores are
copied: the code still migrates every store it opens (a copy is at head, so it finds
nothing to do), and tests/test_migrations.py migrates stores of its own.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

from harness.files import make_private_folder, open_private
from harness.store import open_store

_kept: list[tempfile.TemporaryDirectory[str]] = []


@functools.cache
def _template() -> Path:
    """A closed, migrated store, removed when this process ends.

    Forked children end in `os._exit`, so none of them removes it under the parent.
    """
    folder = tempfile.TemporaryDirectory(prefix="tickwork-template-")
    _kept.append(folder)
    path = Path(folder.name) / "events.db"
    open_store(f"sqlite:///{path}").close()
    return path


def migrated_sqlite(folder: Path) -> str:
    """The URL of `folder`/events.db, made a migrated, empty store unless it is there.

    The folder and the file get the modes opening the store gives them (0700, 0600).
    """
    path = folder / "events.db"
    if not path.exists():
        make_private_folder(folder)
        with _template().open("rb") as source, open(path, "xb", opener=open_private) as copy:
            shutil.copyfileobj(source, copy)
    return f"sqlite:///{path}"
