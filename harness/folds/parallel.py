"""Folding a range in parts: worker processes spawned ahead of their jobs, sums merged.

Workers are fresh interpreters, `python -m harness.folds.worker`, started by `subprocess`
(which execs in C right after the fork, as `multiprocessing`'s spawn does), never a fork
that goes on running Python: the service that catches up runs threads, and such a child
can inherit a lock another thread held. Not `multiprocessing` itself: its spawned child
re-imports the parent's `__main__` (the `tickwork` command's Typer app, a benchmark's
script), which costs the start-up that the parts are meant to save.
"""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
from collections.abc import Sequence
from types import TracebackType

from harness.folds.ranges import RangeQuery, counted
from harness.folds.sums import Kernel, Sums, merge


class FoldWorkerError(RuntimeError):
    """A fold worker ended without a result (killed, or it could not start)."""


class Workers:
    """Fold worker processes, started now so their start-up overlaps the caller's work.

    Each imports the driver of `backend` while its job is still being prepared: psycopg
    alone takes a worker 0.2 s.

    Used as a context manager: a worker still running when the block ends (the caller's
    own part failed) is killed.
    """

    def __init__(self, count: int, backend: str) -> None:
        self._processes = [
            subprocess.Popen(
                [sys.executable, "-m", "harness.folds.worker", backend],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for _ in range(count)
        ]

    @property
    def pids(self) -> list[int]:
        """The workers' process ids."""
        return [process.pid for process in self._processes]

    def fold(self, kernel: Kernel, queries: Sequence[RangeQuery]) -> tuple[Sums, int]:
        """Fold `queries[0]` here and each other in a worker (one each): merged sums, events.

        The jobs go out first, so the workers fold while this process does. An exception a
        worker raised is raised here, noted with the worker's pid.
        """
        if len(queries) != len(self._processes) + 1:
            raise ValueError(f"{len(queries)} ranges for {len(self._processes)} workers + this")
        for process, query in zip(self._processes, queries[1:], strict=True):
            assert process.stdin is not None
            # A worker that died already cannot read its job: it is told by its missing result.
            with contextlib.suppress(BrokenPipeError):
                process.stdin.write(pickle.dumps((kernel, query), pickle.HIGHEST_PROTOCOL))
                process.stdin.flush()
        events, counter = counted(queries[0].data())
        total, folded = kernel(events), next(counter)
        for process in self._processes:
            sums, count = self._result(process)
            merge(total, sums.items())
            folded += count
        return total, folded

    @staticmethod
    def _result(process: subprocess.Popen[bytes]) -> tuple[Sums, int]:
        """The worker's sums and event count, once it has ended; what it raised is raised here."""
        out, err = process.communicate()
        try:
            result = pickle.loads(out)
        except Exception:
            raise FoldWorkerError(
                f"fold worker {process.pid} ended with code {process.returncode} and no "
                f"result: {err.decode(errors='replace').strip()[-2000:]}"
            ) from None
        if isinstance(result, BaseException):
            result.add_note(f"(in fold worker {process.pid})")
            raise result
        folded: tuple[Sums, int] = result
        return folded

    def close(self) -> None:
        """Kill every worker still running and reap them all."""
        for process in self._processes:
            if process.returncode is None:
                process.kill()
                process.communicate()

    def __enter__(self) -> Workers:
        """The workers, killed when the block ends."""
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        """Kill every worker still running (see `close`)."""
        self.close()
