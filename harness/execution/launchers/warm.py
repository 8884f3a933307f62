"""Warm start: ticks forked from a preloaded fork server, about 20 times faster than cold.

The launcher spawns the server (`forkserver.py`) cleanly as a new process when it is
made, and keeps it while it answers; ticks that come before it is ready start cold. Each
tick gets its own socket pair: one end goes to the server with the tick's log file, the
launcher writes the tick's environment and payload on the other and reads back the
child's pid, then its exit status once the server reaped it. A server that died, hung,
failed its warm-up, runs code older than what is installed, or lacks what a service now
asks it to preload is replaced; until the new one is ready, ticks start cold, so no tick
is lost to the launcher. A tick whose server died while it ran is watched through a pidfd
(its exit code is then unknown).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.execution.launchers.base import Launcher, TickProcess
from harness.execution.launchers.cold import WORKER_MODULE, ColdLauncher
from harness.execution.launchers.fork_protocol import DEADLINE, READY, encode_request
from harness.files import open_private

log = logging.getLogger(__name__)

SERVER_MODULE = "harness.execution.launchers.forkserver"
FORK_TIMEOUT = 10.0
"""A server that forks no child within this long is taken for hung."""
READY_TIMEOUT = 120.0
"""A server still warming up after this long is taken for hung."""
RETRY_AFTER_FAILED_WARM_UP = 60.0
STAMP_INTERVAL = 1.0
"""Least time between two looks at the installed code."""
SERVER_ENVIRONMENT = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)
"""What the server keeps of the service's environment: nothing secret, since every
tick gets exactly its own environment after the fork. The CA variables are kept so the
warm-up loads the TLS context the ticks will use (loading one costs a tick ~45 ms)."""


def server_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The fork server's environment: `SERVER_ENVIRONMENT` and the locale of `environ`."""
    return {k: v for k, v in environ.items() if k in SERVER_ENVIRONMENT or k[:3] == "LC_"}


class ForkServerError(Exception):
    """The fork server did not fork the tick (dead, hung, or failed at its start)."""


def code_stamp(roots: Iterable[Path]) -> tuple[str, float]:
    """The installed version and the newest source file: a change means new code."""
    try:
        version = importlib.metadata.version("tickwork")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    newest = 0.0
    for root in roots:
        for path in root.rglob("*.py"):
            try:
                newest = max(newest, path.stat().st_mtime)
            except FileNotFoundError:
                continue
    return version, newest


def _package_roots() -> tuple[Path, ...]:
    import harness
    import workers

    return tuple(Path(module.__file__ or "").parent for module in (harness, workers))


class _Lines:
    """Newline-ended lines read from a socket, each wait bounded by a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def next(self, deadline: float | None) -> bytes | None:
        """The next line; None when the deadline passed first, b"" at the end of the socket."""
        while b"\n" not in self.buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                chunk = self.sock.recv(4096)
            except OSError:
                chunk = b""
            if not chunk:
                return b""
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


class ForkedTick(TickProcess):
    """A tick forked by the server: its exit status arrives on the tick's socket.

    Several threads may wait at once (the runner's, a cancel's): one reads the socket,
    the others wait for it. If the server dies first, the tick's end is seen on its
    pidfd (whoever reaps it, if anyone) and its exit code is unknown (-1), as for a
    process adopted after a restart.
    """

    def __init__(self, pid: int, lines: _Lines) -> None:
        super().__init__(pid)
        self._lines = lines
        self._exit_code: int | None = None
        self.cpu_seconds: float | None = None
        """User and system CPU time of the tick's own process, once it ended."""
        self._pidfd: int | None = None
        self._orphaned = False
        self._reading = threading.Lock()

    def _watch(self) -> None:
        """Hold a pidfd on the child, for the case its server dies before it."""
        with contextlib.suppress(ProcessLookupError):  # reaped: its status line is coming
            self._pidfd = os.pidfd_open(self.pid)

    def wait(self, timeout: float | None) -> int | None:
        """The exit code the server reported, or the pidfd's word once the server is gone."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._exit_code is None and not self._orphaned:
            if not self._reading.acquire(timeout=-1 if timeout is None else timeout):
                return self._exit_code
            try:
                self._read_status(deadline)
            finally:
                self._reading.release()
        if self._exit_code is None and self._orphaned:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self._pidfd is None or select.select([self._pidfd], [], [], left)[0]:
                self._close(-1)
        return self._exit_code

    def _read_status(self, deadline: float | None) -> None:
        while self._exit_code is None and not self._orphaned:
            line = self._lines.next(deadline)
            if line is None:
                return
            if line == b"":
                log.warning("the fork server ended before tick process %s", self.pid)
                self._orphaned = True
                self._lines.sock.close()
            elif line.startswith(b"exit "):
                self._ended(line)

    def _ended(self, line: bytes) -> None:
        """`exit <pid> <code> <cpu seconds>` from the server: the tick was reaped."""
        _, _, code, cpu = line.split()
        self.cpu_seconds = float(cpu)
        self._lines.sock.close()
        self._close(int(code))

    def _close(self, exit_code: int) -> None:
        self._exit_code = exit_code
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def alive(self) -> bool:
        """Whether the tick still runs, without waiting."""
        return self.wait(0) is None


class _Server:
    """One fork server process and the launcher's end of its control socket."""

    def __init__(
        self, worker: str, stamp: tuple[str, float], preloads: frozenset[str], fork_timeout: float
    ) -> None:
        self.stamp = stamp
        self.preloads = preloads
        self.fork_timeout = fork_timeout
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control.settimeout(fork_timeout)
        env = server_environment(os.environ)
        with theirs:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    SERVER_MODULE,
                    "--control",
                    str(theirs.fileno()),
                    "--worker",
                    worker,
                    *(arg for name in sorted(preloads) for arg in ("--preload", name)),
                ],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.spawned_at = time.monotonic()
        self.ready = False
        self._ready_lock = threading.Lock()
        self._send_lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float) -> bool:
        """Whether the server is ready within `timeout`; ForkServerError if it failed."""
        if self.ready or not self._ready_lock.acquire(timeout=timeout):
            return self.ready  # a start does not queue behind another thread's long wait
        try:
            if not self.ready and select.select([self.control], [], [], timeout)[0]:
                if self.control.recv(len(READY)) != READY:
                    code = self.process.wait()
                    raise ForkServerError(f"the fork server ended in its warm-up ({code})")
                self.ready = True
        except (OSError, ValueError) as exc:  # discarded by another thread meanwhile
            raise ForkServerError(f"the fork server is gone: {exc}") from exc
        finally:
            self._ready_lock.release()
        return self.ready

    def fork(self, payload_json: bytes, log_path: Path, env: dict[str, str]) -> ForkedTick:
        deadline = time.time() + self.fork_timeout
        give_up = time.monotonic() + self.fork_timeout + 2  # no fork after `deadline`
        mine, theirs = socket.socketpair()
        with open(log_path, "ab", opener=open_private) as log_file:
            try:
                with theirs, self._send_lock:
                    socket.send_fds(
                        self.control,
                        [DEADLINE.pack(deadline)],
                        [theirs.fileno(), log_file.fileno()],
                    )
                mine.settimeout(self.fork_timeout)
                mine.sendall(encode_request(env, payload_json))
                lines = _Lines(mine)
                first = lines.next(give_up)
            except OSError as exc:
                mine.close()
                raise ForkServerError(f"the fork server took no request: {exc}") from exc
        if not first:
            mine.close()
            raise ForkServerError("the fork server forked no child in time")
        tick = ForkedTick(int(first.split()[1]), lines)
        if first.startswith(b"exit "):  # the child died before it could say its pid
            tick._ended(first)
        else:
            tick._watch()
        return tick

    def retire(self) -> None:
        """No more forks: the server exits once its last tick ended."""
        self.control.close()

    def kill(self) -> None:
        self.control.close()
        self.process.kill()
        self.process.wait()


class WarmLauncher(Launcher):
    """Forks ticks from a warm server; cold spawns whenever that server cannot.

    Args:
        worker: the module the ticks run (`warm_up()` in the server, `serve(payload)` in
            each tick, and `python -m` for a cold start).
        watched: source folders whose change (with the installed version) restarts the
            server; by default the `harness` and `workers` packages.
        preloads: what the server's `warm_up` imports besides the worker (`preload` adds
            more later).

    `fork_timeout` (a server that forks nothing this long is hung) and `stamp_interval`
    (how often the installed code is looked at) may be set after construction.
    """

    def __init__(
        self,
        worker: str = WORKER_MODULE,
        watched: Iterable[Path] = (),
        preloads: Iterable[str] = (),
    ) -> None:
        self.worker = worker
        self.preloads = frozenset(preloads)
        self.fork_timeout = FORK_TIMEOUT
        self.stamp_interval = STAMP_INTERVAL
        self.cold = ColdLauncher(worker)
        self.watched = tuple(watched) or _package_roots()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._retired: list[_Server] = []
        self._next_try = 0.0
        self._stamp = code_stamp(self.watched)
        self._stamp_at = time.monotonic()
        self._current()  # it warms up while the service gets ready

    @property
    def server_pid(self) -> int | None:
        """The pid of the server in use or warming up, if any."""
        server = self._server
        return server.pid if server is not None else None

    def preload(self, names: Iterable[str]) -> None:
        """Have the server preload `names` too; one that does not yet is replaced now.

        A service whose levels need a protocol, agent CLI or tool the server lacks (a second
        service in the process, a reload) gets it in the next server; ticks forked from the
        old one meanwhile import it themselves.
        """
        with self._lock:
            self.preloads |= frozenset(names)
        self._current(look_at_code=False)

    def warming(self) -> bool:
        """Whether a server is warming up: a tick started now would start cold."""
        server = self._server
        return server is not None and not server.ready and server.process.poll() is None

    def wait_ready(self, timeout: float) -> bool:
        """Whether a server is ready to fork within `timeout` (if not, ticks start cold).

        Worth waiting for only where no cancel can come meanwhile (a benchmark, a test):
        a tick the launcher holds is not yet the runner's to cancel.
        """
        return self._ready_server(timeout) is not None

    def _start(self, payload_json: bytes, log_path: Path, env: dict[str, str]) -> TickProcess:
        try:
            server = self._ready_server(0, look_at_code=False)
            if server is not None:
                try:
                    return server.fork(payload_json, log_path, env)
                except ForkServerError as exc:
                    self._discard(server, exc)
            return self.cold._start(payload_json, log_path, env)
        finally:
            self._current()  # new code is looked for once the tick runs, not before it

    def _ready_server(self, timeout: float, look_at_code: bool = True) -> _Server | None:
        """The server to fork from, if it is ready within `timeout`.

        A start never waits for a warm-up: the runner cannot cancel a tick while its
        launcher holds it, so a tick that finds no server ready starts cold.
        """
        server = self._current(look_at_code)
        if server is None:
            return None
        try:
            if server.wait_ready(timeout):
                return server
            if time.monotonic() - server.spawned_at > READY_TIMEOUT:
                raise ForkServerError(f"the fork server is not ready after {READY_TIMEOUT:.0f} s")
        except ForkServerError as exc:
            self._discard(server, exc)
        return None

    def _current(self, look_at_code: bool = True) -> _Server | None:
        """The server in use or warming up, started anew if it is gone or its code is old.

        Looking at the code scans the source folders (milliseconds): a start skips it and
        looks right after, so a new server is ready for the next tick.
        """
        with self._lock:
            self._retired = [s for s in self._retired if s.process.poll() is None]
            server = self._server
            if server is not None and server.process.poll() is not None:
                log.warning("the fork server %s ended (exit %s)", server.pid, server.process.poll())
                server.control.close()
                server = self._server = None
            stamp = self._check_stamp() if look_at_code or server is None else server.stamp
            why = None if server is None else self._outdated(server, stamp)
            if server is not None and why is not None:
                log.info("the fork server %s is replaced: %s", server.pid, why)
                if server.ready:
                    server.retire()
                    self._retired.append(server)
                else:  # it forked nothing: its warm-up is not worth finishing
                    server.kill()
                server = self._server = None
            if server is None and time.monotonic() >= self._next_try:
                server = self._server = _Server(
                    self.worker, stamp, self.preloads, self.fork_timeout
                )
            return server

    def _outdated(self, server: _Server, stamp: tuple[str, float]) -> str | None:
        """Why `server` must be replaced (None: it serves on)."""
        if server.stamp != stamp:
            return "new code is installed"
        missing = self.preloads - server.preloads
        if missing:
            return f"the levels need {', '.join(sorted(missing))} preloaded"
        return None

    def _check_stamp(self) -> tuple[str, float]:
        if time.monotonic() - self._stamp_at >= self.stamp_interval:
            self._stamp = code_stamp(self.watched)
            self._stamp_at = time.monotonic()
        return self._stamp

    def _discard(self, server: _Server, why: Exception) -> None:
        log.warning("fork server %s discarded, ticks start cold meanwhile: %s", server.pid, why)
        with self._lock:
            if self._server is server:
                self._server = None
                if not server.ready:
                    self._next_try = time.monotonic() + RETRY_AFTER_FAILED_WARM_UP
        server.kill()

    def close(self) -> None:
        """Retire the servers; each exits once the ticks it forked have ended.

        A server still warming up has forked nothing: it is killed, not left to spend
        seconds on imports no tick will use while it holds the stopped service's output.
        """
        with self._lock:
            for server in [self._server, *self._retired]:
                if server is None:
                    continue
                if server.ready:
                    server.retire()
                else:
                    server.kill()
            self._server = None
