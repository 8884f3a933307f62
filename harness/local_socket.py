"""One JSON request, one JSON answer, over a Unix socket only this user can reach.

A running service already holds every module, connection and read model a question needs;
a short-lived command that asks it pays for its own start-up and nothing else. Standard
library only, so the asking side imports none of what the answering side holds.

The socket lives in a folder of mode 0700 owned by this user: the file system, not a
token, keeps other users out. A path bound by a live process is left to it; one left
behind by a dead process is taken over.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

Answer = Callable[[Any], Any]
"""The request, decoded, to the answer to encode; None declines (the asker works alone)."""

MAX_REQUEST = 64 * 1024
"""Bytes a request may take: requests are a few flags, so more is not a request."""

ACCEPT_POLL = 0.5
"""Seconds between two looks at `stopping` while no one asks."""

CONNECTION_TIMEOUT = 10.0
"""Seconds one exchange may take, on either side: a silent peer does not hold the other."""


class NotServed(Exception):
    """The socket cannot be served here (unsafe folder, path too long, already answered)."""


def ask(path: Path, request: Any, timeout: float = CONNECTION_TIMEOUT) -> Any | None:
    """The answer of whoever serves `path`, or None: nobody does, or it gave no answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(timeout)
            connection.connect(str(path))
            connection.sendall(json.dumps(request).encode() + b"\n")
            connection.shutdown(socket.SHUT_WR)
            answer = _read_all(connection)
    except OSError:
        return None
    try:
        return json.loads(answer) if answer else None
    except ValueError:
        return None


def serve(
    path: Path, answer: Answer, stopping: threading.Event, failed: Callable[[Exception], None]
) -> None:
    """Answer every request on `path` until `stopping` is set, one at a time.

    Raises NotServed before serving if the path cannot be taken. An answer that raises is
    handed to `failed` and closes that connection without a word, so its asker falls back
    on its own; the next request is served as usual.
    """
    listener = _bind(path)
    bound = path.stat().st_ino
    try:
        listener.settimeout(ACCEPT_POLL)
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                _exchange(connection, answer, failed)
    finally:
        listener.close()
        _unlink_own(path, bound)


def _bind(path: Path) -> socket.socket:
    _private_folder(path.parent)
    if path.exists():
        if _accepts(path):
            raise NotServed(f"{path}: another process answers there")
        path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        listener.listen()
    except OSError as exc:
        listener.close()
        raise NotServed(f"{path}: {exc.strerror or exc}") from exc
    return listener


def _private_folder(folder: Path) -> None:
    """`folder` exists, belongs to this user and no one else may enter it, or NotServed."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        held = folder.lstat()
    except OSError as exc:
        raise NotServed(f"{folder}: {exc.strerror or exc}") from exc
    if not stat.S_ISDIR(held.st_mode) or held.st_uid != os.getuid():
        raise NotServed(f"{folder}: not a folder of this user")
    if stat.S_IMODE(held.st_mode) & 0o077:
        raise NotServed(f"{folder}: others may enter it (mode {stat.S_IMODE(held.st_mode):o})")


def _accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _exchange(
    connection: socket.socket, answer: Answer, failed: Callable[[Exception], None]
) -> None:
    connection.settimeout(CONNECTION_TIMEOUT)
    try:
        request = json.loads(_read_all(connection, MAX_REQUEST))
    except (OSError, ValueError):
        return
    try:
        reply = answer(request)
    except Exception as exc:  # whatever it was, the service runs on and the asker reads alone
        failed(exc)
        return
    if reply is None:
        return
    try:
        connection.sendall(json.dumps(reply).encode())
    except OSError:
        return


def _read_all(connection: socket.socket, limit: int | None = None) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := connection.recv(65536):
        chunks.append(chunk)
        size += len(chunk)
        if limit is not None and size > limit:
            raise ValueError("request too large")
    return b"".join(chunks)


def _unlink_own(path: Path, bound: int) -> None:
    """Remove the socket file unless another process has bound the path since."""
    try:
        if path.stat().st_ino == bound:
            path.unlink()
    except OSError:
        return
