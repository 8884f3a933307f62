"""The `tickwork` command run as an operator runs it: real processes, real ports, real files."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from harness.devtools.fake_llm import FakeUpstream, Step
from tests.waiting import wait_until

TICKWORK = str(Path(sys.executable).with_name("tickwork"))


def environment(**extra: str) -> dict[str, str]:
    """This process's environment without the developer's own TICKWORK_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    env.update(extra)
    return env


def run(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_each(cwd, [list(args)], env)[0]


def run_each(
    cwd: Path, commands: list[list[str]], env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """Each command in a `tickwork` process of its own, all started at once.

    Checks that do not depend on each other overlap their start-ups (half a second of
    imports each) instead of paying them one after another.
    """
    processes = [
        subprocess.Popen(
            [TICKWORK, *args],
            cwd=cwd,
            env=environment(**(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in commands
    ]
    ended = []
    for process in processes:
        stdout, stderr = process.communicate(timeout=120)
        ended.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    return ended


def write_config(tmp_path: Path, levels: str, runner: str = "", store_url: str = "") -> Path:
    """A tickwork.toml for a service under test: its store, folders, runner and levels."""
    config = tmp_path / "tickwork.toml"
    config.write_text(
        f"""
[store]
url = "{store_url or f"sqlite:///{tmp_path}/events.db"}"
[paths]
results = "{tmp_path}/results"
spool = "{tmp_path}/spool"
[runner]
shutdown_grace_seconds = 1
grace_seconds = 1
{runner}
{levels}
"""
    )
    return config


def start(command: str, config: Path, fake: FakeUpstream, **popen: Any) -> subprocess.Popen[str]:
    """`tickwork <command>` on the config, talking to the fake upstream."""
    env = environment(TICKWORK_CONFIG=str(config), OPENAI_BASE_URL=fake.url)
    return subprocess.Popen(
        [TICKWORK, *command.split()], env=env, cwd=config.parent, text=True, **popen
    )


def start_tick(
    tick_id: str, config: Path, fake: FakeUpstream, options: str = ""
) -> subprocess.Popen[str]:
    """`tickwork tick min` with the tick id chosen, so its answers can be scripted first."""
    return start(
        f"tick min --tick-id {tick_id} {options}",
        config,
        fake,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def run_cli(command: str, config: Path, fake: FakeUpstream) -> subprocess.CompletedProcess[str]:
    process = start(command, config, fake, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def start_service(config: Path, fake: FakeUpstream) -> subprocess.Popen[str]:
    return start("run", config, fake, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


class Output:
    """A process's output read line by line as it comes, so a test can wait for a line.

    The process must have been started with `stdout=PIPE`; nothing else may read it.
    """

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        self.process = process
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: Any) -> None:
        for line in stream:
            self.lines.append(line)

    def wait_for(self, text: str) -> str:
        """The first line holding `text`; fails if the process ends without printing it."""

        def printed() -> str | None:
            found = next((line for line in self.lines if text in line), None)
            assert found or self._reader.is_alive(), f"ended without {text!r}: {self.text()}"
            return found

        return wait_until(printed, f"a line with {text!r}")

    def text(self) -> str:
        return "".join(self.lines)

    def stop(self) -> str:
        """SIGTERM the process, wait for its end and return everything it printed."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(120)
        self._reader.join(120)
        return self.text()


@contextmanager
def fake_server(steps: list[Step]) -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    server.script("default", steps)
    try:
        yield server
    finally:
        server.stop()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def serve(
    cwd: Path, *args: str, env: dict[str, str], port: int | None = None
) -> Iterator[tuple[str, list[str]]]:
    """`tickwork serve` on `port` (default: a free one) until the block ends.

    Yields its URL and a list that holds the server's output once the block has ended.
    """
    port = port or free_port()
    process = subprocess.Popen(
        [TICKWORK, "serve", "--port", str(port), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    output: list[str] = []

    def answers() -> bool:
        assert process.poll() is None, process.communicate()[0]
        try:
            httpx.get(f"{url}/", timeout=10)
        except httpx.TransportError:
            return False
        return True

    try:
        wait_until(answers, "tickwork serve to answer", interval=0.2)
        yield url, output
    finally:
        process.send_signal(signal.SIGINT)
        output.append(process.communicate(timeout=60)[0])


def busy_level(every: str, timeout: int = 120) -> str:
    """The level `busy`: a tick every `every`, running alongside the ticks still in flight."""
    return f"""
[levels.busy]
every = "{every}"
overlap = "allow"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = {timeout}
"""
