"""One question to a running service on a Unix socket: answered, declined, or nobody there."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.local_socket import Answer, NotServed, ask, serve


@contextmanager
def serving(path: Path, answer: Answer, failures: list[Exception]) -> Iterator[None]:
    """`answer` served on `path` in a thread, once it has answered a first question."""
    stopping = threading.Event()
    thread = threading.Thread(target=serve, args=(path, answer, stopping, failures.append))
    thread.start()
    while ask(path, "ready") is None:
        assert thread.is_alive(), "the socket was not served"
        stopping.wait(0.01)
    try:
        yield
    finally:
        stopping.set()
        thread.join()


def test_a_served_question_is_answered_declined_or_failed_and_the_service_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run" / "s.sock"
    assert ask(path, {"x": 1}) is None, "nobody serves: no answer, no error"

    def answer(request: Any) -> Any:
        if request == "fail":
            raise RuntimeError("broken")
        return None if request == "decline" else {"echo": request}

    failures: list[Exception] = []
    with serving(path, answer, failures):
        assert ask(path, {"x": [1, "é"]}) == {"echo": {"x": [1, "é"]}}
        assert ask(path, "decline") is None
        assert ask(path, "fail") is None
        assert ask(path, "again") == {"echo": "again"}
        assert (path.parent.stat().st_mode & 0o777) == 0o700
    assert [str(exc) for exc in failures] == ["broken"]
    assert not path.exists(), "the socket file leaves with its service"


def test_a_live_socket_is_left_to_its_process_and_a_dead_one_is_taken_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.sock"
    tmp_path.chmod(0o700)
    failures: list[Exception] = []
    with serving(path, lambda request: "first", failures):
        with pytest.raises(NotServed, match="another process answers there"):
            serve(path, lambda request: "second", threading.Event(), failures.append)
        assert ask(path, None) == "first"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays behind, as a killed service leaves it
    with serving(path, lambda request: "taken over", failures):
        assert ask(path, None) == "taken over"


def test_a_folder_others_may_enter_is_not_served_from(tmp_path: Path) -> None:
    open_folder = tmp_path / "shared"
    open_folder.mkdir(mode=0o755)
    open_folder.chmod(0o755)
    with pytest.raises(NotServed, match="others may enter it"):
        serve(open_folder / "s.sock", lambda request: "x", threading.Event(), print)
