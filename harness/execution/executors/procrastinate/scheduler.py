"""The scheduler's side: `tickwork run` defers a job per claimed tick, workers run them.

Its queue is procrastinate's: a claim is queued by deferring its job, withdrawn by
cancelling the job while it is `todo`, stopped by aborting it while it is `doing`.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import datetime

from harness.contracts import TickTaken, tick_stream
from harness.execution.executors.base import HandoffExecutor
from harness.execution.executors.procrastinate.base import OnStore
from harness.execution.executors.procrastinate.jobs import Locks, defer, jobs_in
from harness.execution.hedge import TWIN_SUFFIX
from harness.execution.panels import REPLACEMENT
from harness.scheduling import RunningTick, SlotClaim
from harness.store import (
    StoredEvent,
    StoreError,
    cancel_job,
    process_name,
    recently_connected,
)

REDELIVER_SECONDS = 2.0
"""How often a scheduler defers again the jobs it could not defer (the store was out)."""
PART = re.compile(rf"(.+)(?:-p\d+|-p{REPLACEMENT}|{TWIN_SUFFIX})")
"""The tick id of a panel member or hedge twin; its group is the tick it belongs to."""


class ProcrastinateExecutor(OnStore, HandoffExecutor):
    """`tickwork run`'s side: defers a job per claimed tick; workers on any host run them."""

    def _set_up(self) -> None:
        self.locks = Locks(self.settings)
        self.undelivered: list[SlotClaim] = []
        """Claims whose defer failed (store out): deferred again until it lands."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._redeliverer = threading.Thread(target=self._redeliver, daemon=True)

    def _submit(self, claim: SlotClaim) -> bool:
        if self._closed.is_set():
            return False
        try:
            defer(self.store, self.settings, self.locks, [claim])
        except StoreError as exc:
            self.report(f"{claim.tick_id} not deferred yet ({exc}): trying again")
            with self._lock:
                self.undelivered.append(claim)
                if self._redeliverer.ident is None:
                    self._redeliverer.start()
        return True

    def _redeliver(self) -> None:
        while not self._closed.wait(REDELIVER_SECONDS):
            with self._lock:
                waiting = list(self.undelivered)
            try:
                defer(self.store, self.settings, self.locks, waiting)
            except StoreError:
                continue
            with self._lock:
                del self.undelivered[: len(waiting)]

    def abandoned(self, tick_id: str, level: str) -> str | None:
        """A claim whose scheduler died is the outbox: its job is deferred if it has none.

        A panel member or hedge twin a worker claimed is part of that worker's job, not a
        job of its own: the sweeper ends it with the job's tick when the worker dies.
        """
        part = PART.fullmatch(tick_id)
        if part is not None:
            parent = self.store.read_stream(tick_stream(part.group(1)))
            if any(e.type == TickTaken.type for e in parent):
                return None
        scheduled = self.store.read_stream(tick_stream(tick_id), limit=1)
        slot = scheduled[0].data.get("slot") if scheduled else None
        claim = SlotClaim(tick_id, level, datetime.fromisoformat(slot) if slot else None)
        deferred = defer(self.store, self.settings, self.locks, [claim])
        return "deferred (its scheduler died before it could)" if deferred else None

    def claimer_gone(self, host: str, pid: int) -> bool:
        """Whether a scheduler of another host is gone: no connection of it lately active.

        None of its connections (`harness.store.process_name`) is open and was active in
        the last `stalled_seconds`. A live scheduler asks the store every half second; a
        lost host's connections linger on the server, idle, until its TCP keepalive gives
        up. Deferring is keyed by tick id, so a claim taken on too early runs once all the
        same; only a buffered tick (`buffer_one`, `buffer_all`, `cancel_other`) its scheduler
        still holds back could start early.
        """
        name, seconds = process_name(host, pid), self.settings.executor.stalled_seconds
        return not recently_connected(self.store, name, seconds)

    def running(self) -> list[RunningTick]:
        """The ticks some worker runs now."""
        return list(jobs_in(self.store, ["doing"]))

    def _withdraw(self, matches: Callable[[SlotClaim], bool]) -> list[SlotClaim]:
        """Cancel the matching queued jobs; only a job still `todo` is cancelled (atomically)."""
        withdrawn = []
        for job in jobs_in(self.store, ["todo"]):
            claim = SlotClaim(job.tick_id, job.level, None)
            if not matches(claim):
                continue
            if job.job_id is not None and cancel_job(self.store, job.job_id, abort=False):
                withdrawn.append(claim)
        return withdrawn

    def _cancel_running(self, tick_id: str, reason: str) -> bool:
        """Ask procrastinate to abort the tick's job; the worker running it kills its group.

        That worker also follows the control stream and stops the tick with the reason
        recorded there, which is usually first.
        """
        job = next((job for job in jobs_in(self.store, ["doing"]) if job.tick_id == tick_id), None)
        if job is None or job.job_id is None:
            return False
        return cancel_job(self.store, job.job_id, abort=True)

    def adopt(self, started: StoredEvent, now: datetime) -> None:
        """Workers own the ticks they started; a dead one's ticks end by `sweep_stalled`."""

    def _close(self) -> None:
        """Queued jobs stay queued: workers run them whether a scheduler runs or not."""
        self._closed.set()

    def _drain(self, grace: float) -> None:
        if self._redeliverer.ident is not None:
            self._redeliverer.join()

    def wait_idle(self, timeout: float) -> None:
        """Wait until no tick job is queued or running (for tests and callers of `fire`)."""
        deadline = time.monotonic() + timeout
        while jobs_in(self.store, ["todo", "doing"]) or self.undelivered:
            if time.monotonic() > deadline:
                raise TimeoutError(f"tick jobs still queued or running after {timeout} s")
            time.sleep(0.2)
