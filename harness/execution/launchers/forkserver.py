"""The fork server: a process that imported everything once and forks each tick from it.

`python -m harness.execution.launchers.forkserver --control FD --worker MODULE [--preload
NAME ...]` imports the worker module, runs its `warm_up(preloads)` (the names of what the
service's levels use: protocols, agent CLIs, tools; what no level uses is left to the tick
that needs it, not held in every server) with the cycle collector off, freezes the heap
(`gc.freeze`, so a child's pages stay shared until it writes them) and announces itself
ready on the control socket. It runs no thread, ever: forking a multi-threaded process can
leave a lock held forever in the child, which is why the launcher spawns this process
instead of forking itself.

For each request (a tick socket and the tick's log file, passed as descriptors) it forks
a child that becomes the tick exactly as a cold start would: a new session and process
group, default signal handlers, stdout and stderr on the log, no other inherited
descriptor, only the tick's environment, a fresh random state, and the worker's
`serve(payload)` as its whole life. The child says its pid on the tick socket once it
leads its process group (so the runner can signal the group from then on); the server
watches it through a pidfd, reaps it and sends its exit status and CPU time there. When
the launcher closes the control socket (or its process dies), the server forks nothing
more and exits once its last child has been reaped.

The command line names the worker module, so a restarted service recognises a forked
tick as a worker when it adopts ticks left running (`scheduling/reconcile.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import json
import os
import random
import selectors
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from types import ModuleType
from typing import NoReturn

from harness.execution.launchers.child_exit import end_as_python_would
from harness.execution.launchers.fork_protocol import DEADLINE, FRAME, READY

PAYLOAD_READ_TIMEOUT = 30.0


@dataclass
class Child:
    """A forked tick the server watches through its pidfd until it can reap and report it."""

    pid: int
    pidfd: int
    conn: socket.socket


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the launcher closed the tick socket before the request was whole")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_request(conn: socket.socket) -> tuple[dict[str, str], bytes]:
    conn.settimeout(PAYLOAD_READ_TIMEOUT)
    env_size, payload_size = FRAME.unpack(_read_exactly(conn, FRAME.size))
    env = json.loads(_read_exactly(conn, env_size))
    return env, _read_exactly(conn, payload_size)


def become_tick(conn: socket.socket, log_fd: int, worker: ModuleType) -> NoReturn:
    """The child's whole life: shed the server, read the request, run the tick, exit."""

    def tick() -> int:
        os.setsid()
        conn.sendall(f"pid {os.getpid()}\n".encode())
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        env, payload = _read_request(conn)
        conn.detach()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        os.environ.clear()
        os.environ.update(env)
        random.seed()
        return int(worker.serve(payload))

    end_as_python_would(tick)


class Server:
    """The single-threaded loop: fork on request, report each child's end."""

    def __init__(self, control: socket.socket, worker: ModuleType) -> None:
        self.control = control
        self.worker = worker
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, Child] = {}
        self.accepting = True

    def run(self) -> None:
        """Serve fork requests and report exits until the launcher hangs up and no child runs."""
        self.selector.register(self.control, selectors.EVENT_READ)
        while self.accepting or self.children:
            for key, _ in self.selector.select():
                if key.fileobj is self.control:
                    self._on_request()
                else:
                    self._reap(key.data)

    def _on_request(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.control, DEADLINE.size, 2)
        except ConnectionResetError:  # the launcher was killed: a hang-up like a close
            data, fds = b"", []
        if not data:
            self.accepting = False
            self.selector.unregister(self.control)
            self.control.close()
            return
        conn, log_fd = socket.socket(fileno=fds[0]), fds[1]
        try:
            (deadline,) = DEADLINE.unpack(data)
            if time.time() < deadline:  # else the launcher started the tick cold already
                self._fork(conn, log_fd)
                return
        finally:
            os.close(log_fd)
        conn.close()

    def _fork(self, conn: socket.socket, log_fd: int) -> None:
        """Fork a tick; the child itself says its pid once it leads its own process group."""
        if threading.active_count() != 1:
            raise RuntimeError("the fork server runs a thread: it must not fork")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            become_tick(conn, log_fd, self.worker)
        child = Child(pid, os.pidfd_open(pid), conn)
        self.children[pid] = child
        self.selector.register(child.pidfd, selectors.EVENT_READ, child)

    def _reap(self, child: Child) -> None:
        """Send the child's exit status (negative: killed by that signal, as Popen has it)."""
        self.selector.unregister(child.pidfd)
        os.close(child.pidfd)
        _, status, usage = os.wait4(child.pid, 0)
        del self.children[child.pid]
        code, cpu = os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime
        with contextlib.suppress(OSError):  # the launcher went away; the server carries on
            child.conn.sendall(f"exit {child.pid} {code} {cpu:.6f}\n".encode())
        child.conn.close()


def warm_up(worker_name: str, preloads: frozenset[str]) -> ModuleType:
    """Import the worker and run its warm-up with the cycle collector off, then freeze the heap.

    No collection comes before the freeze, as CPython's `gc.freeze` documentation has it for
    a process that forks: the memory it frees is where a child's new objects land, copying
    those pages. A pass over the warmed heap (some 340,000 objects for an OpenAI level) was
    0.22 s of a 1.46 s warm-up, to free 3,900 objects (0.7 MiB), and each held warm tick
    had 21.9-22.0 MiB of its own against 20.3-20.4 MiB without it (`tick_bench.py`, two
    runs each). The garbage stays frozen in the server, shared and untouched.
    """
    gc.disable()
    worker = importlib.import_module(worker_name)
    worker.warm_up(preloads)
    if threading.active_count() != 1:
        sys.exit("the warm-up started a thread: this process must not fork")
    gc.freeze()
    gc.enable()
    return worker


def main() -> None:
    """Entry point of the server process the warm launcher spawns."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--control", type=int, required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--preload", action="append", default=[])
    args = parser.parse_args()
    control = socket.socket(fileno=args.control)
    worker = warm_up(args.worker, frozenset(args.preload))
    try:
        control.sendall(READY)
    except BrokenPipeError:
        return  # the launcher went away during the warm-up
    Server(control, worker).run()


if __name__ == "__main__":
    main()
