"""Files other processes read while they may be written: whole or not at all.

What tickwork writes may quote what an upstream said or a tool found: files are created
0600 and folders 0700, readable by the service's own user only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def make_private_folder(path: Path) -> None:
    """Create `path` and its missing parents with mode 0700; existing ones stay as they are."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)


def open_private(path: str, flags: int) -> int:
    """An `opener` for `open()` that creates the file with mode 0600."""
    return os.open(path, flags, 0o600)


def write_atomically(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Temp file in the same folder, fsync, rename, fsync of the folder.

    A reader sees either no file or a whole one, also after a crash or power loss.
    """
    with atomic_file(path, mode) as file:
        file.write(data)


@contextmanager
def atomic_file(path: Path, mode: int = 0o600) -> Iterator[BinaryIO]:
    """A file written in a temp file beside `path`, renamed over it when the block ends.

    For files too large to hold in memory first (an archive): fsync before the rename and
    of the folder after it, as `write_atomically`. When the block raises, the temp file
    is removed and `path` is left as it was; a killed process leaves only the temp file,
    named `.<name>.<pid>.<thread>.tmp`.
    """
    make_private_folder(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(temporary, "wb", opener=lambda p, f: os.open(p, f, mode)) as file:
            yield file
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
