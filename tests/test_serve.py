"""`tickwork serve` as an operator starts it: a real process, a real port, the token rule.

One test starts the console script in a fresh interpreter, as a shell does; the others
fork the same command from the warm test process (`tests.commands.serve` with `forked`).
"""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import httpx

from tests import web
from tests.commands import environment, forked, free_port, serve

TOKEN = "tw-serve-token-9b2e71"


def refused_to(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`tickwork serve` that must not start: it exits 2 at once."""
    ended = forked(cwd, "serve", *args, env=env)
    assert ended.returncode == 2, ended.stdout + ended.stderr
    return ended


def test_a_non_loopback_bind_without_a_token_is_refused(tmp_path: Path) -> None:
    refused = refused_to(tmp_path, "--host", "0.0.0.0", "--port", str(free_port()))
    assert "0.0.0.0" in refused.stderr and "TICKWORK_API_TOKEN" in refused.stderr
    assert not (tmp_path / ".tickwork").exists(), "refused before the store is touched"


def test_with_a_token_it_binds_beyond_loopback_and_asks_every_request_for_it(
    tmp_path: Path,
) -> None:
    env = environment(TICKWORK_API_TOKEN=TOKEN)
    with serve(tmp_path, "--host", "0.0.0.0", env=env, forked=True) as served:
        assert web.get(f"{served.url}/status").status_code == 401
        wrong = web.get(f"{served.url}/status", headers={"Authorization": "Bearer guess"})
        assert wrong.status_code == 401
        right = web.get(f"{served.url}/status", headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200 and right.json()["levels"] == []
    assert "bearer token required" in served.output
    assert TOKEN not in served.output, "the token is never logged"


def test_on_loopback_it_serves_without_a_token(tmp_path: Path) -> None:
    with serve(tmp_path, env=environment()) as served:
        assert web.get(f"{served.url}/status").status_code == 200
        assert "tickwork" in web.get(f"{served.url}/").text


def test_a_short_token_is_refused_without_echoing_it(tmp_path: Path) -> None:
    short = refused_to(tmp_path, "--host", "0.0.0.0", TICKWORK_API_TOKEN="hunter2")
    assert "api.token" in short.stderr and "at least 16 characters" in short.stderr
    assert "hunter2" not in short.stderr


def test_a_token_in_the_config_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "tickwork.toml").write_text(f'[api]\ntoken = "{TOKEN}"\n')
    refused = refused_to(tmp_path)
    assert "api.token" in refused.stderr and "TICKWORK_API_TOKEN" in refused.stderr
    assert TOKEN not in refused.stderr


def test_a_second_serve_on_a_taken_port_says_so_in_one_line(tmp_path: Path) -> None:
    port = free_port()
    with serve(tmp_path, env=environment(), port=port, forked=True) as served:
        second = forked(tmp_path, "serve", "--port", str(port))
        assert web.get(f"{served.url}/status").status_code == 200, "the first one serves on"
    assert second.returncode == 1, second.stdout + second.stderr
    assert second.stdout == "", "nothing announced: it never served"
    assert second.stderr == (
        f"error: port {port} on 127.0.0.1 is taken (another `tickwork serve`?): stop it, or "
        "choose another with --port\n"
    )


def test_a_thread_that_meets_an_unexpected_error_stops_it_in_one_line(tmp_path: Path) -> None:
    """As `tickwork run` and `tickwork worker`: no `Exception in thread` and traceback.

    A thread of the process raises once the API answers; the HTTP server stops as at
    SIGTERM, the store is closed, and the command exits 1 having said why in one line.
    """
    port = free_port()

    def watch() -> None:
        while True:
            try:
                web.get(f"http://127.0.0.1:{port}/status", timeout=10)
                break
            except httpx.TransportError:
                threading.Event().wait(0.2)
        raise ValueError("a bug")

    ended = forked(tmp_path, "serve", "--port", str(port), beside=watch)
    assert ended.returncode == 1, ended
    said = "stopping: thread watch ended on an unexpected error, ValueError: a bug\n"
    assert ended.stderr == said, ended
    assert ended.stdout.startswith("tickwork API and dashboard on"), ended


def test_sigterm_stops_it_with_its_store_closed_and_exit_status_0(tmp_path: Path) -> None:
    """As `tickwork run` stops, not as uvicorn leaves it.

    uvicorn raises the SIGTERM it caught again once it stopped serving: under the default
    handler the process died there, its store never closed (SQLite's WAL left behind).
    """
    store = tmp_path / ".tickwork"
    with serve(tmp_path, env=environment(), forked=True, stop=signal.SIGTERM) as served:
        assert web.get(f"{served.url}/status").status_code == 200
        assert (store / "events.db-wal").exists(), "the store is open"
    assert served.returncode == 0, served.output
    assert sorted(path.name for path in store.iterdir()) == ["events.db"], "closed: no WAL left"
