"""New SQLite stores are copies of one migrated per schema, kept in the user's cache."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.store import HEAD_REVISION, current_revision, open_store, scratch_sqlite
from harness.store.scratch import PREFIX, STALE_SECONDS, cache_folder


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return cache_folder()


def test_a_scratch_store_is_private_empty_and_at_head(cache: Path, tmp_path: Path) -> None:
    url = scratch_sqlite(tmp_path / "one")
    assert stat.S_IMODE(os.stat(tmp_path / "one" / "events.db").st_mode) == 0o600
    store = open_store(url)
    try:
        assert current_revision(store.engine) == HEAD_REVISION
        assert store.last_position() == 0
    finally:
        store.close()
    (kept,) = cache.glob(f"{PREFIX}*.db")
    assert kept.name.startswith(f"{PREFIX}{HEAD_REVISION}-")


def test_the_second_store_is_copied_without_alembic(cache: Path, tmp_path: Path) -> None:
    scratch_sqlite(tmp_path / "first")
    probe = (
        "import sys; from pathlib import Path; from harness.store import scratch_sqlite; "
        f"scratch_sqlite(Path({str(tmp_path / 'second')!r})); print('alembic' in sys.modules)"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache.parent)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    assert (tmp_path / "second" / "events.db").stat().st_size > 0


def test_a_new_embedded_store_opens_as_a_private_copy_without_alembic(
    cache: Path, tmp_path: Path
) -> None:
    """`open_store` of a file not there yet (`tickwork init`, a first start) copies too."""
    scratch_sqlite(tmp_path / "first")
    new = tmp_path / "new" / "events.db"
    probe = (
        "import sys; from harness.store import current_revision, open_store; "
        f"store = open_store({f'sqlite:///{new}'!r}); "
        "print(current_revision(store.engine), store.last_position(), 'alembic' in sys.modules)"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(cache.parent)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [HEAD_REVISION, "0", "False"]
    assert stat.S_IMODE(os.stat(new).st_mode) == 0o600
    assert list(new.parent.glob(".*")) == [], "no partial copy is left"


def test_a_stale_schemas_copy_leaves_when_this_ones_is_made_and_one_in_use_stays(
    cache: Path, tmp_path: Path
) -> None:
    cache.mkdir(parents=True)
    older = cache / f"{PREFIX}0001-0123456789abcdef.db"
    older.write_bytes(b"an older schema, unused for two days")
    two_days_ago = time.time() - 2 * STALE_SECONDS
    os.utime(older, (two_days_ago, two_days_ago))
    other = cache / f"{PREFIX}0002-fedcba9876543210.db"
    other.write_bytes(b"another checkout's schema, in use now")
    scratch_sqlite(tmp_path / "store")
    assert not older.exists() and other.exists()
    assert len(list(cache.glob(f"{PREFIX}*.db"))) == 2


def test_a_cache_that_cannot_be_written_means_migrating_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    store = open_store(scratch_sqlite(tmp_path / "store"))
    try:
        assert current_revision(store.engine) == HEAD_REVISION
    finally:
        store.close()
