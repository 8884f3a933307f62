"""Empty SQLite stores for throwaway use, copied from one migrated once per schema.

The fork server's warm-up runs a throwaway tick that records into a store of its own, a
file deleted seconds later. Migrating a new file imports Alembic and runs every migration:
~0.8 s of CPU, a fifth of a warm-up, paid again by every server a service starts (each
restart, each code change). One store migrated per schema (its revision and its
migrations' text) is kept in the user's cache folder and copied (milliseconds); a cache
that cannot be written means migrating in place, as before. Writing a new schema's copy
removes the copies no process has used for a day (`STALE_SECONDS`): another checkout on
another schema, whose copy is in use, keeps it (removing it under a process about to copy
it failed that process's store).
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
from harness.store.migrate import script_folder
from harness.store.opening import open_store
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
        open_store(f"sqlite:///{partial}").close()
        os.replace(partial, template)  # concurrent makers each put a whole file there
    except OSError:
        return None
    stale = time.time() - STALE_SECONDS
    for older in folder.glob(f"{PREFIX}*.db"):
        with contextlib.suppress(OSError):
            if older != template and older.stat().st_mtime < stale:
                older.unlink()
    return template


def scratch_sqlite(folder: Path) -> str:
    """The URL of a new, empty, migrated store at `folder`/events.db (private: 0600)."""
    path = folder / "events.db"
    make_private_folder(folder)
    template = migrated_copy(cache_folder())
    if template is None:
        open_store(f"sqlite:///{path}").close()
    else:
        with template.open("rb") as source, open(path, "xb", opener=open_private) as copy:
            shutil.copyfileobj(source, copy)
    return f"sqlite:///{path}"
