"""New SQLite stores, copied from one migrated once per schema.

Migrating a new file runs every migration (0.14 s of CPU) after importing Alembic, paid by
every embedded store made: `tickwork init` took 0.74 s of CPU so, 0.50 s copying, and a
fork server's throwaway tick, a service's first start and each test's store paid it too.
One store migrated per schema (its revision and its migrations' text) is kept in the
user's cache folder, and a new store is a copy of it (3 ms, `ops/bench/store_setup_bench.py`);
a cache that cannot be written means migrating in place, as before.
Writing a new schema's copy removes the copies no process has used for a day
(`STALE_SECONDS`): another checkout on another schema, whose copy is in use, keeps it
(removing it under a process about to copy it failed that process's store).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import time
from pathlib import Path

from harness.files import make_private_folder, open_private
from harness.store.engine import create_store_engine
from harness.store.migrate import script_folder, upgrade
from harness.store.schema import HEAD_REVISION

PREFIX = "empty-store-"
STALE_SECONDS = 86_400
"""A copy unused this long (its modification time, renewed on each use) may be removed."""


def cache_folder() -> Path:
    """Where the migrated copy is kept: `$XDG_CACHE_HOME/tickwork`, else `~/.cache/tickwork`."""
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "tickwork"


@functools.cache
def schema_key() -> str:
    """The schema's name: its head revision and a digest of its migrations' text.

    Read once a process: a test process copies hundreds of stores.
    """
    digest = hashlib.sha256(HEAD_REVISION.encode())
    for path in sorted(script_folder().glob("versions/*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return f"{HEAD_REVISION}-{digest.hexdigest()[:16]}"


def migrated_copy(folder: Path) -> Path | None:
    """The cached, migrated, empty store of this schema, made now if missing (None: no cache)."""
    template = folder / f"{PREFIX}{schema_key()}.db"
    if template.exists():
        with contextlib.suppress(OSError):
            os.utime(template)  # in use: not stale for another schema's maker
        return template
    try:
        make_private_folder(folder)
        partial = folder / f".{template.name}.{os.getpid()}"
        partial.unlink(missing_ok=True)
        migrate_in_place(partial)
        os.replace(partial, template)  # concurrent makers each put a whole file there
    except OSError:
        return None
    stale = time.time() - STALE_SECONDS
    for older in folder.glob(f"{PREFIX}*.db"):
        with contextlib.suppress(OSError):
            if older != template and older.stat().st_mtime < stale:
                older.unlink()
    return template


def migrate_in_place(path: Path) -> None:
    """Make the file at `path` a store at this schema with Alembic (what a copy saves)."""
    engine = create_store_engine(f"sqlite:///{path}")
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def new_sqlite(path: Path) -> None:
    """Make `path` an empty store at this schema, private (0600), unless a file is there.

    The copy is written beside `path` and linked to it: a process opening the same new
    store at the same moment finds either no file or a whole one, and a store another
    process made first is kept.
    """
    make_private_folder(path.parent)
    template = migrated_copy(cache_folder())
    if template is None:
        migrate_in_place(path)
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        with template.open("rb") as source, open(partial, "wb", opener=open_private) as copy:
            shutil.copyfileobj(source, copy)
        try:
            os.link(partial, path)
        except FileExistsError:
            pass  # another process made it first: its store is kept
        except OSError:
            migrate_in_place(path)  # a file system without links
    finally:
        partial.unlink(missing_ok=True)


def scratch_sqlite(folder: Path) -> str:
    """The URL of a new, empty, migrated store at `folder`/events.db (private: 0600)."""
    path = folder / "events.db"
    if path.exists():
        raise FileExistsError(f"{path} is there already: a scratch store is a new one")
    new_sqlite(path)
    return f"sqlite:///{path}"
