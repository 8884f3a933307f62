"""Ticks started by hand, owned in the process that started them: `tickwork tick` and the API.

A manual tick runs in the manual lane with the lifecycle of every tick (pause, budget,
caps, cancel): it is claimed, waits until the lane has a place across every process,
and runs in an executor of its own, following the control stream so that `tickwork
cancel` from anywhere reaches it. The tick itself is a process of its own, as every
tick is (the launcher's job); its owner is a thread of the caller, never a CLI process.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

from harness import interruptible
from harness.config import Settings
from harness.contracts import tick_stream
from harness.execution.executors import LocalExecutor
from harness.execution.launchers import ColdLauncher
from harness.execution.prepare import Preparer, TickSetupError, new_tick_id
from harness.execution.runner import Runner, TickOutcome
from harness.projections import CallCounts, Projector, TicksProjection, calls_said
from harness.routing import Router
from harness.scheduling import (
    POLL_SECONDS,
    ControlFollower,
    Manual,
    SlotClaim,
    claim_wave,
    manual_ticks_ahead,
    record_levels,
)
from harness.store import EventStore, StoreError

FOREVER = 7 * 24 * 3600.0
"""How long an owner waits for its tick: the tick's own deadline and retries end it first."""

Say = Callable[[str], None]


class ManualTick:
    """One tick started by hand, claimed and then run to its end by this process.

    Setting `interrupted` and `wake` (Ctrl-C on `tickwork tick`, a stopping server) ends
    it cancelled with `reason`, whether it still waits for its place or runs.
    """

    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        *,
        env: Mapping[str, str],
        router: Router | None,
        reason: str,
        say: Say = lambda line: None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.reason = reason
        """Why the tick ended cancelled when it is interrupted."""
        self.say = say
        """Told what a watcher of the tick wants to know: its place in line, its calls."""
        self.preparer = Preparer(settings, store, env=env, router=router)
        self.outcomes: list[TickOutcome] = []
        # One tick, then the owner ends: a fork server's warm-up would cost more than the
        # cold start it saves.
        runner = Runner(settings, store, ColdLauncher(), env=env, router=router)
        self.executor = LocalExecutor(
            settings, self.preparer, runner, lambda line: None, self.outcomes.append
        )
        self.interrupted = threading.Event()
        self.wake = threading.Event()
        """Set with `interrupted`: the owner acts at once instead of at its next poll."""

    def claim(
        self,
        level: str,
        *,
        prompt: str | None = None,
        timeout: float | None = None,
        force: bool = False,
        tick_id: str | None = None,
    ) -> SlotClaim:
        """Claim the tick; a request that cannot run is refused before anything is recorded.

        Raises:
            TickSetupError: the level, prompt or model cannot make a tick.
        """
        prepared = self.preparer.prepare(level, prompt=prompt, timeout=timeout, tick_id=tick_id)
        manual = Manual(prompt, timeout, force)
        # The levels of this process's file, which may not be the scheduler's revision.
        revision = record_levels(self.store, self.settings.levels)
        claim = SlotClaim(
            prepared.payload.tick_id,
            level,
            None,
            routed=prepared.routed,
            manual=manual,
            config=prepared.config,
            config_revision=revision,
        )
        claim_wave(self.store, self.settings, [claim])
        return claim

    def run(self, claim: SlotClaim) -> TickOutcome | None:
        """Run the claimed tick to its end, following the control stream.

        None when it ended without running (interrupted while it waited for its place).
        """
        ended = threading.Event()
        follower = ControlFollower(self.store, self.executor, self.settings.levels)
        progress = Progress(self.store, claim.tick_id, self.say)

        def follow() -> None:
            while not ended.is_set():
                with contextlib.suppress(StoreError):
                    progress.poll()
                if self.interrupted.is_set():
                    self.executor.cancel(lambda level, tick_id: True, self.reason)
                with contextlib.suppress(StoreError):  # the runner spools; the next poll asks
                    follower.poll()
                self.wake.wait(POLL_SECONDS)
                self.wake.clear()

        following = threading.Thread(target=follow, name="control", daemon=True)
        following.start()
        try:
            if not self._await_place(claim):
                return None
            self.executor.submit(claim)
            self.executor.wait_idle(FOREVER)
        finally:
            ended.set()
            self.wake.set()
            interruptible.join(following)
            self.executor.shutdown(grace=0)
        return self.outcomes[0] if self.outcomes else None

    def _await_place(self, claim: SlotClaim) -> bool:
        """Wait until the manual lane has a place for the tick across every process.

        False when interrupted first: the tick is then ended cancelled without starting.
        """
        projector = Projector(self.store, [TicksProjection()])
        cap = self.settings.runner.manual_max_concurrent
        told = False
        while not self.interrupted.is_set():
            try:
                ahead = manual_ticks_ahead(self.store, projector, claim.tick_id)
            except StoreError:
                ahead = cap  # unknown: ask again after the poll
            if ahead < cap:
                return True
            if not told:
                self.say(f"waiting: {ahead} manual tick(s) ahead of this one hold the lane's {cap}")
                told = True
            self.wake.wait(POLL_SECONDS)
            self.wake.clear()
        self.executor.never_started(claim, self.reason)
        return False


class Progress:
    """Counts a running tick's model and tool calls from its stream, and says when they change."""

    def __init__(self, store: EventStore, tick_id: str, say: Say) -> None:
        self.store = store
        self.stream = tick_stream(tick_id)
        self.say = say
        self.after = 0
        self.counts = CallCounts()
        self.started = time.monotonic()

    def poll(self) -> None:
        """Read what the tick recorded since the last poll; one line if calls ended."""
        batch = self.store.read_stream(self.stream, after=self.after)
        if not batch:
            return
        self.after = batch[-1].stream_position
        counts = self.counts
        calls = (counts.model_calls, counts.tool_calls, counts.tool_calls_cancelled)
        for event in batch:
            counts.add(event.type, event.data)
        if (counts.model_calls, counts.tool_calls, counts.tool_calls_cancelled) != calls:
            tokens = counts.prompt_tokens + counts.completion_tokens
            said = calls_said(counts.model_calls, counts.tool_calls, counts.tool_calls_cancelled)
            self.say(
                f"... {time.monotonic() - self.started:.1f} s: {tokens:,} tokens in {said} so far"
            )


Upstream = Callable[[], AbstractContextManager[Mapping[str, str]]]
"""Enters the environment a tick's process gets (its upstream) for the length of one tick."""


class ManualTicks:
    """The run-now button's owner: each tick started here is owned by a thread of this process.

    A tick gets its upstream for its own length (`upstream`), as a `tickwork tick` does.
    `close` (the server stops) refuses new ticks and ends the running ones cancelled: a
    stopped server's thread cannot see its tick to the end.
    """

    STOPPED = "the server that started it stopped"

    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        *,
        upstream: Upstream,
        router: Router | None,
        say: Say = lambda line: None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.upstream = upstream
        self.router = router
        self.say = say
        self._owners: dict[threading.Thread, ManualTick] = {}
        self._lock = threading.Lock()
        self._closed = False

    def start(self, level: str, *, force: bool = False) -> str | None:
        """Start one tick of `level` now; its id, or None once closed.

        The tick is claimed in its thread, so the caller does not wait for the store; a
        request that cannot run ends there, recorded nowhere, and is told to `say`.
        """
        tick_id = new_tick_id(level)
        thread = threading.Thread(
            target=self._own, args=(level, tick_id, force), name=tick_id, daemon=True
        )
        with self._lock:
            if self._closed:
                return None
            thread.start()
        return tick_id

    def _own(self, level: str, tick_id: str, force: bool) -> None:
        with self.upstream() as env:
            owner = ManualTick(
                self.settings, self.store, env=env, router=self.router, reason=self.STOPPED
            )
            with self._lock:
                if self._closed:
                    return
                self._owners[threading.current_thread()] = owner
            try:
                owner.run(owner.claim(level, force=force, tick_id=tick_id))
            except (TickSetupError, StoreError) as exc:  # nobody to raise to: it is told
                self.say(f"{tick_id} did not run: {exc}")
            finally:
                with self._lock:
                    del self._owners[threading.current_thread()]

    def close(self) -> None:
        """Start no more ticks; end the running ones cancelled and wait for their ends."""
        with self._lock:
            self._closed = True
            owners = dict(self._owners)
        for owner in owners.values():
            owner.interrupted.set()
            owner.wake.set()
        for thread in owners:
            interruptible.join(thread)
