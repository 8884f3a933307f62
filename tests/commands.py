"""The `tickwork` command run as an operator runs it: real processes, real ports, real files.

`run`/`run_each` start a fresh interpreter per command, as a shell does; `forked`,
`forked_each` and `forked_cli` run the same command in a child forked from the warm test
process: a process of its own all the same, at a fraction of the CPU, and `start` forks
the commands that run on while a test goes on (services, workers, ticks). Use `run` where
the fresh process is the point (what it imports, the console script), `forked` elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import logging
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import httpx

from harness.devtools.fake_llm import FakeUpstream, Step
from harness.execution.launchers import end_as_python_would
from tests import web
from tests.store_support import migrated_sqlite
from tests.waiting import wait_until

TICKWORK = str(Path(sys.executable).with_name("tickwork"))
_LIBC = ctypes.CDLL(None, use_errno=True)
"""glibc's `tgkill` (2.30+): a signal to one thread of another process."""


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


def forked(
    cwd: Path,
    *args: str,
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
    beside: Callable[[], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    return forked_each(cwd, [list(args)], env, unset, beside)[0]


def forked_each(
    cwd: Path,
    commands: list[list[str]],
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
    beside: Callable[[], None] | None = None,
) -> list[subprocess.CompletedProcess[str]]:
    """Each command as `run_each` runs it, in a child forked from this process.

    Each is still a process of its own (its own pid, exit status, signals, working
    directory, environment and files: a SIGKILL at a phase ends it with -9 and leaves
    this test standing), started from the `tickwork` entry point with its arguments, but
    without the half second of CPU each fresh interpreter spends importing Typer, Rich,
    SQLAlchemy and the stages this test process has already imported. `env` adds to the
    environment as `run`'s does; `unset` names variables the command must not see. Tests whose point
    is the fresh process itself (what it imports, the console script) keep `run`.

    `beside`: run in a thread of each child (named after it), started before the command,
    as a script that starts one and then calls the entry point would: what a command does
    when a thread of its process meets an error.
    """
    from harness.cli import main  # imported here, once, so every child starts warm

    environments = [
        {k: v for k, v in environment(**(env or {})).items() if k not in unset} for _ in commands
    ]
    ended = []
    with contextlib.ExitStack() as files:
        children = []
        for args, child_env in zip(commands, environments, strict=True):
            stdout = files.enter_context(tempfile.TemporaryFile())
            stderr = files.enter_context(tempfile.TemporaryFile())
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child ends in os._exit, never returns
                if beside is not None:
                    threading.Thread(target=beside, name=beside.__name__, daemon=True).start()
                _run_child(main, cwd, args, child_env, stdout.fileno(), stderr.fileno())
            children.append((pid, args, stdout, stderr))
        for pid, args, stdout, stderr in children:
            code = _wait(pid, timeout=120)
            stdout.seek(0)
            stderr.seek(0)
            output, errors = (f.read().decode("utf-8", "replace") for f in (stdout, stderr))
            ended.append(subprocess.CompletedProcess([TICKWORK, *args], code, output, errors))
    return ended


def warm_for_forks() -> None:
    """Load here, once, what each forked store command would otherwise load on its own.

    A child forked from this process finds loaded what this process loaded: the CLI
    (`forked_each` imports it too) and the price tables' tier bounds, which every
    catch-up of the spend read model reads (`harness.prices._snapshot_tier_bounds`,
    cached a process): importing genai-prices and walking its tables cost each
    `tickwork archive` or `projections rebuild` child ~0.05 s more until this process
    had folded spend itself. The children run the same code, which finds them cached as
    a long-lived process's second catch-up does. For a module whose tests fork many
    such commands (a fixture of its own calls this).
    """
    from harness.cli import main  # noqa: F401 - imported for the children
    from harness.prices import PriceBook

    PriceBook().tier_bounds()


def _run_child(
    main: Any, cwd: Path, args: list[str], env: dict[str, str], stdout: int, stderr: int
) -> NoReturn:
    """In the forked child: become `tickwork <args>` in `cwd` with `env`, then exit as it does."""

    def command() -> int:
        with open(os.devnull, "rb") as nothing:
            os.dup2(nothing.fileno(), 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - until os._exit
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        # What the test process set up is not the command's: pytest's log capture on the
        # root logger (the warm launcher it may share is forgotten at every fork).
        logging.root.handlers.clear()
        logging.root.setLevel(logging.WARNING)
        _forget_secrets()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.argv = [TICKWORK, *args]
        main()
        return 0

    end_as_python_would(command)


def _forget_secrets() -> None:
    """Start the child with the secret registry a fresh process has (`SECRET_ENV` only).

    This test process may have registered other tests' secrets: a child that redacted
    them too could hide a leak a fresh `tickwork` would show.
    """
    from harness.contracts import secrets

    secrets._lock = threading.Lock()  # another thread may have held it at the fork
    secrets._registered.clear()
    secrets._registered.update(secrets.SECRET_ENV)
    secrets._held.clear()


def _wait(pid: int, timeout: float) -> int:
    """The child's exit code as `subprocess` gives it (-N for signal N); killed after `timeout`."""
    if not _exited(pid, timeout):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise subprocess.TimeoutExpired([TICKWORK], timeout)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _exited(pid: int, timeout: float | None) -> bool:
    """Whether the child `pid` has exited within `timeout` (None: however long), unreaped."""
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    return bool(ready)


class ForkedCommand:
    """A `tickwork` command that runs on while the test goes on, forked as `forked_each` forks.

    A process of its own (its pid, signals, exit status, output) that skips the second of
    CPU a fresh interpreter spends on imports before a service or worker is up. It offers
    the part of `subprocess.Popen` tests use; the output is text.
    """

    def __init__(
        self,
        cwd: Path,
        args: list[str],
        env: dict[str, str],
        stdout: Any = None,
        stderr: Any = None,
    ) -> None:
        from harness.cli import main  # imported here, once, so every child starts warm

        self.args = [TICKWORK, *args]
        self.returncode: int | None = None
        self._reaping = threading.Lock()
        out = os.pipe() if stdout == subprocess.PIPE else None
        err = os.pipe() if stderr == subprocess.PIPE else None
        child_out = out[1] if out else 1
        child_err = child_out if stderr == subprocess.STDOUT else err[1] if err else 2
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child ends in os._exit, never returns
            _run_child(main, cwd, args, env, child_out, child_err)
        ForkedCommand.started.append(self)
        self.stdout = self._reader(out)
        self.stderr = self._reader(err)

    started: ClassVar[list[ForkedCommand]] = []
    """The commands forked by the test running now (`end_leftovers` ends them after it)."""

    @classmethod
    def end_leftovers(cls) -> None:
        """Kill what a test left running (one that failed before it stopped its service).

        A leftover service holds its pipes and store open: it kept the failed test's
        output from pytest (a reader waiting on it) and, under `make test`, its worker.
        """
        while cls.started:
            command = cls.started.pop()
            command.kill()
            with contextlib.suppress(ChildProcessError):
                command.wait()

    @staticmethod
    def _reader(pipe: tuple[int, int] | None) -> Any:
        if pipe is None:
            return None
        os.close(pipe[1])
        return open(pipe[0], encoding="utf-8", errors="replace")

    def poll(self) -> int | None:
        with self._reaping:
            if self.returncode is None:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not _exited(self.pid, timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        with self._reaping:
            if self.returncode is None:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # as Popen: a reaped pid may be another process's by now
            os.kill(self.pid, signum)

    def send_signal_to_a_thread(self, signum: int) -> None:
        """`signum` to a thread of the command other than its main one.

        The kernel hands a signal sent to the process to any thread that does not block
        it; Python runs the handler in the main thread. This is the case where the two
        differ, which a test cannot otherwise choose.
        """
        assert self.poll() is None, "the command has ended"
        for task in sorted(Path(f"/proc/{self.pid}/task").iterdir()):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread gone
                blocked = re.search(r"^SigBlk:\s*(\w+)", (task / "status").read_text(), re.M)
                if int(task.name) == self.pid or blocked is None:
                    continue
                takes = not int(blocked.group(1), 16) & (1 << (signum - 1))
                if takes and _LIBC.tgkill(self.pid, int(task.name), signum) == 0:
                    return
        raise AssertionError(f"no thread but the main one of {self.pid} takes signal {signum}")

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Its output to the end, read while it runs (a full pipe would stall it), and its end."""
        read: dict[str, str] = {}
        readers = [
            threading.Thread(target=lambda n=name, f=stream: read.update({n: f.read()}))
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            reader.join()
        return read.get("out"), read.get("err")


COLD = 'launcher = "cold"'
"""`[runner]` of a service with a tick or two, or none: each starts cold, and no fork server
warms up for them (a warm-up costs more CPU than two cold starts)."""


def write_config(tmp_path: Path, levels: str, runner: str = "", store_url: str = "") -> Path:
    """A tickwork.toml for a service under test: its store, folders, runner and levels.

    Without `store_url`, a migrated SQLite store in `tmp_path`.
    """
    config = tmp_path / "tickwork.toml"
    config.write_text(
        f"""
[store]
url = "{store_url or migrated_sqlite(tmp_path)}"
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


def start(command: str, config: Path, fake: FakeUpstream, **pipes: Any) -> ForkedCommand:
    """`tickwork <command>` on the config, talking to the fake upstream, forked (`ForkedCommand`).

    `pipes`: `stdout` and `stderr` as `subprocess.Popen` takes them (PIPE, STDOUT, or
    None to share this process's).
    """
    env = {"TICKWORK_CONFIG": str(config), "OPENAI_BASE_URL": fake.url}
    return ForkedCommand(config.parent, command.split(), environment(**env), **pipes)


def start_tick(tick_id: str, config: Path, fake: FakeUpstream, options: str = "") -> ForkedCommand:
    """`tickwork tick min` with the tick id chosen, so its answers can be scripted first."""
    return start(
        f"tick min --tick-id {tick_id} {options}",
        config,
        fake,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def forked_cli(command: str, config: Path, fake: FakeUpstream) -> subprocess.CompletedProcess[str]:
    """`tickwork <command>` on the config, talking to the fake upstream, in a forked child."""
    env = {"TICKWORK_CONFIG": str(config), "OPENAI_BASE_URL": fake.url}
    return forked(config.parent, *command.split(), env=env)


def start_service(config: Path, fake: FakeUpstream) -> ForkedCommand:
    return start("run", config, fake, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


class Output:
    """A process's output read line by line as it comes, so a test can wait for a line.

    The process must have been started with `stdout=PIPE`; nothing else may read it.
    """

    def __init__(self, process: ForkedCommand) -> None:
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

        try:
            return wait_until(printed, f"a line with {text!r}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; it printed:\n{self.text()}") from None

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


FIRST_PORT = 10_000
"""Below it the usual ports of services (PostgreSQL's, Redis's, RabbitMQ's); from it to the
kernel's ephemeral range, the blocks `free_port` hands out (one per xdist worker, at most
`WORKER_BLOCKS`). A port another program holds is passed over."""
WORKER_BLOCKS = 16
_handed_out = itertools.count()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now, and no other test process hands out.

    A port the kernel gave for a bind to port 0 (then closed) comes from its ephemeral
    range, where the next bind to port 0 or outgoing connection of any process may get it
    before the test's server binds it: `tickwork serve` failed so once ("port ... is
    taken"), in a test that had just started a service binding its fake to port 0. These
    come from below that range, each xdist worker from a block of its own, in turn.
    """
    block = _worker_ports()
    for _ in block:
        port = block[next(_handed_out) % len(block)]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # another program's, or a closed one's still in TIME_WAIT
            return port
    raise RuntimeError(f"no free port in {block}")


@functools.cache
def _worker_ports() -> range:
    """This xdist worker's block of ports, below the kernel's ephemeral range."""
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    size = (ephemeral - FIRST_PORT) // WORKER_BLOCKS
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    first = FIRST_PORT + (worker % WORKER_BLOCKS) * size
    return range(first, first + size)


@dataclass
class Served:
    """A `tickwork serve` of `serve`: its URL; once the block ended, its output and exit status."""

    url: str
    output: str = ""
    returncode: int | None = None


@contextmanager
def serve(
    cwd: Path,
    *args: str,
    env: dict[str, str],
    port: int | None = None,
    forked: bool = False,
    stop: signal.Signals = signal.SIGINT,
) -> Iterator[Served]:
    """`tickwork serve` on `port` (default: a free one) until the block ends, then `stop`.

    `forked`: forked from this process (`ForkedCommand`) rather than a fresh interpreter.
    """
    port = port or free_port()
    argv = ["serve", "--port", str(port), *args]
    pipes: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    process = (
        ForkedCommand(cwd, argv, env, **pipes)
        if forked
        else subprocess.Popen([TICKWORK, *argv], cwd=cwd, env=env, text=True, **pipes)
    )
    served = Served(f"http://127.0.0.1:{port}")

    def answers() -> bool:
        assert process.poll() is None, process.communicate()[0]
        try:
            web.get(f"{served.url}/", timeout=10)
        except httpx.TransportError:
            return False
        return True

    try:
        wait_until(answers, "tickwork serve to answer", interval=0.2)
        yield served
    finally:
        process.send_signal(stop)
        served.output = process.communicate(timeout=60)[0] or ""
        served.returncode = process.returncode


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
