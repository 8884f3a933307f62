"""The runner owns a tick's run: attempts, retries, deadline, cancel, kill, one terminal event.

Every tick stream ends in exactly one terminal event, whatever the worker did: the runner
decides it from the clock and the result file alone (a missing or corrupt file is a
failure with that reason), and reads that file once: the attempt's end carries the parsed
result on to retries, promotion and the outcome. At the deadline the whole process group
gets SIGTERM, a grace period, then SIGKILL, and the runner checks that no process of the
group is left. The payload is prepared before (`harness.execution.prepare`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from tenacity import RetryCallState, Retrying, stop_never, wait_exponential

from harness.config import Settings, tick_page
from harness.contracts import (
    FailureClass,
    GovernorFired,
    LevelPaused,
    LevelResumed,
    ResultFileError,
    TickAttemptFailed,
    TickCancelled,
    TickCompleted,
    TickEvent,
    TickFailed,
    TickResult,
    TickTimedOut,
    decode,
    level_stream,
    read_result,
    tick_stream,
)
from harness.execution.cutoff import cut_off_calls
from harness.execution.hedge import Places, Race, hedge_after
from harness.execution.launchers import Launcher, TickProcess, launcher_for, preloads_of
from harness.execution.lifecycle import Decisions, Life
from harness.execution.prepare import PreparedTick, TickRef, worker_env
from harness.governor import Alerts, Verdict, urls_from_env
from harness.prices import PriceBook
from harness.projections import CallCounts, count_calls
from harness.routing import Catalog, Escalation, Router, catalog_record
from harness.scheduling import SlotClaim
from harness.store import EventStore, Spool, StoreError, append_or_spool, release_tick

STDERR_TAIL_BYTES = 2000

WARM_UP_WAIT = 15.0
"""Seconds a tick waits for a warming fork server before it starts cold instead."""

WARM_UP_SLICE = 0.2
"""Seconds between two looks at a cancel while a tick waits for the warm-up."""

PAUSING = {
    "infrastructure": "failed on infrastructure after retries",
    "configuration": "failed on configuration (not retried)",
}
"""Failure classes that pause the level, fail-closed until an operator resumes it."""


@dataclass(frozen=True)
class Ended:
    """How an attempt ended: its terminal event, and the result file it was decided from."""

    event: TickEvent
    result: TickResult | None = None
    """Parsed once, when the event was decided; None when there was none to use."""


@dataclass(frozen=True)
class TickOutcome:
    """How a tick ended, with its parsed result, so the result file is read once."""

    tick_id: str
    level: str
    status: str
    """completed, failed, timed_out or cancelled."""
    reason: str | None
    result: TickResult | None
    result_path: Path
    log_path: Path


class Runner:
    """Runs a prepared tick: launches it, supervises it, retries it and records its end."""

    def __init__(
        self,
        settings: Settings,
        store: EventStore | None,
        launcher: Launcher | None = None,
        env: Mapping[str, str] | None = None,
        router: Router | None = None,
    ) -> None:
        """`router`: the ticks' own; its catalog in force bills a level between attempts."""
        self.settings = settings
        self.store = store
        self.router = router
        self._preloaded_levels, self._preloaded_catalog = settings.levels, self._catalog()
        self.launcher = launcher or launcher_for(settings, self._preloaded_catalog)
        self.env = dict(os.environ if env is None else env)
        self.spool = Spool(settings.paths.spool)
        self.decisions = Decisions(settings, store, router) if store is not None else None
        self._lock = threading.Lock()
        self._lives: dict[str, Life] = {}
        self._throttles: list[Callable[[float], None]] = []
        self._hedge_winners: dict[str, TickOutcome] = {}
        self.places: Places | None = None
        """Where a hedge's twin takes its place under the caps (the executor's queue)."""

    def on_infrastructure_failure(self, throttle: Callable[[float], None]) -> None:
        """Call `throttle` with the backoff chosen after each attempt failing on infrastructure.

        The executor's queue spaces every start by it for a while (`infra_throttle_seconds`).
        """
        self._throttles.append(throttle)

    def cancel_queued(self, tick_id: str, level: str, reason: str) -> None:
        """End a claimed tick that never started: it waited for a place, the service stopped."""
        self.record(TickCancelled(tick_id=tick_id, level=level, reason=reason))

    def run(self, tick: PreparedTick, claimed: bool = False, forced: bool = False) -> TickOutcome:
        """Run a prepared tick to its end, retrying failed attempts as its class allows.

        Infrastructure failures get `infra_retries` more attempts with exponential backoff;
        when they are spent the level is paused (fail-closed) until an operator resumes it.
        Content failures get `content_retries`. Each failed attempt that is tried again is
        recorded as `TickAttemptFailed`; only the last attempt's end is terminal. Before
        every attempt the decisions in force are asked again (`harness.execution.lifecycle`),
        and a cancel ends a backoff at once: a stopped tick starts no further attempt.
        """
        life = Life(tick.ref, forced)
        self.enlist(life)
        try:
            return self._live(tick, life, claimed)
        finally:
            self.dismiss(life)

    def enlist(self, life: Life) -> None:
        """Own a tick's life here: cancels reach it, `running` lists it."""
        with self._lock:
            self._lives[life.ref.tick_id] = life

    def dismiss(self, life: Life) -> None:
        """The life has ended (its terminal event is recorded)."""
        with self._lock:
            self._lives.pop(life.ref.tick_id, None)

    def _live(self, tick: PreparedTick, life: Life, claimed: bool) -> TickOutcome:
        if not claimed:
            claim = SlotClaim(
                tick.payload.tick_id, tick.payload.level, tick.slot, routed=tick.routed
            )
            if tick.routed is not None:
                recorded = catalog_record(tick.routed.catalog)
                append_or_spool(self.store, self.spool, recorded.stream_id, [recorded.to_record()])
            self.record(claim.scheduled(tick.payload.model))
        policy = self.settings.runner
        backoff = wait_exponential(
            multiplier=policy.retry_backoff_seconds, max=policy.retry_backoff_max_seconds
        )

        escalation = Escalation(tick.payload, tick.routed, self.record)
        level = tick.config or self.settings.levels.get(tick.payload.level)
        content_retries = policy.content_retries
        if level is not None and level.content_retries is not None:
            content_retries = level.content_retries

        def again(state: RetryCallState) -> bool:
            ended = state.outcome.result() if state.outcome else None
            failure = _failure(ended.event) if ended else None
            if ended is None or failure is None or life.hedge_won:
                return False
            if failure[0] == "infrastructure":
                for throttle in self._throttles:
                    throttle(backoff(state))
            allowed = {"infrastructure": policy.infra_retries, "content": content_retries}
            retries = state.attempt_number - escalation.first_attempt
            if retries < allowed.get(failure[0], 0):
                return True
            end = ended.event
            return isinstance(end, TickFailed) and escalation.promote(
                end, state.attempt_number, ended.result
            )

        def note_retry(state: RetryCallState) -> None:
            end = state.outcome.result().event if state.outcome else None
            failure = _failure(end) if end else None
            assert end is not None and failure is not None
            delay = state.next_action.sleep if state.next_action else 0.0
            self.record(
                TickAttemptFailed(
                    tick_id=end.tick_id,
                    level=end.level,
                    attempt=state.attempt_number,
                    failure_class=failure[0],
                    reason=failure[1],
                    retry_in_seconds=delay,
                )
            )

        attempts = Retrying(
            retry=again,
            stop=stop_never,
            wait=backoff,
            sleep=life.back_off,
            before_sleep=note_retry,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        )
        ended: Ended = attempts(
            lambda: self.attempt(
                replace(tick, payload=escalation.payload),
                attempts.statistics.get("attempt_number", 1),
                life,
            )
        )
        terminal = ended.event
        self.record(terminal)
        _drop_if_empty(tick.ref.log_path)
        failure = _failure(terminal)
        if failure is not None and failure[0] in PAUSING and not life.hedge_won:
            reason = f"{tick.payload.tick_id} {PAUSING[failure[0]]}: "
            self.record_level(LevelPaused(level=tick.payload.level, reason=reason + failure[1]))
        self.alert_governor(tick.ref)
        with self._lock:
            won = self._hedge_winners.pop(tick.ref.tick_id, None)
        return won or _outcome(tick.ref, ended)

    def alert_governor(self, ref: TickRef) -> None:
        """Tell the operator of the tick's first governor decision, once it has ended.

        The worker cannot: alert URLs are secrets its environment never holds. A tick
        adopted after a restart is ended here too (`watch`, `harness.execution.adopt`), so
        its alert is sent like that of a tick this runner started.
        """
        urls = urls_from_env(self.env)
        if not urls or self.store is None:
            return
        try:
            stored = self.store.read_stream(tick_stream(ref.tick_id))
        except StoreError:
            return
        for event in map(decode, stored):
            if isinstance(event, GovernorFired):
                Alerts(urls).send(
                    Verdict.of_event(event),
                    f"tick {ref.tick_id} ({ref.level})",
                    tick_page(self.settings.api.public_url, ref.tick_id),
                )
                return

    def attempt(self, tick: PreparedTick, number: int, life: Life) -> Ended:
        """Run attempt `number` of a tick, unless a decision in force stops it first."""
        self._preload_reloaded_levels()
        self._await_warm_up(life)
        payload = tick.payload
        ids = {"tick_id": payload.tick_id, "level": payload.level}
        decided = self.decisions.stop_reason(**ids, forced=life.forced) if self.decisions else None
        if decided is not None:
            life.stop(decided)
        if life.reason is not None:
            return self.ended_cancelled(life, life.reason)
        payload.result_path.unlink(missing_ok=True)  # an earlier attempt's must not count
        process = self.launcher.start(
            payload.model_dump_json().encode(),
            tick.log_path,
            worker_env(self.env, payload, self.settings.store.url),
        )
        with self._lock:
            life.process = process
            stopped_meanwhile = life.reason is not None
        if stopped_meanwhile:
            self._stop_soon(process)
        self.record(tick.started(process.pid, number))
        config = tick.config or self.settings.levels.get(payload.level)
        threshold = hedge_after(config, tick.timeout)
        if threshold is None or not life.may_hedge:
            return self.await_end(life, process, tick.timeout)
        race = Race(self, tick, life)
        ended = race.run(process, threshold)
        if race.winner == "twin" and race.twin_ended is not None:
            with self._lock:
                self._hedge_winners[life.ref.tick_id] = _outcome(race.twin.ref, race.twin_ended)
        return ended

    def _catalog(self) -> Catalog | None:
        """The routing catalog in force, None without a router."""
        return None if self.router is None else self.router.source.catalog

    def _preload_reloaded_levels(self) -> None:
        """Tell the launcher what a reloaded catalog or levels need (a new fork server).

        A reload swaps the levels whole (`Settings.replace_levels`) and the catalog whole
        (`CatalogSource`), so the check is two comparisons of identity per attempt.
        """
        levels, catalog = self.settings.levels, self._catalog()
        if levels is not self._preloaded_levels or catalog is not self._preloaded_catalog:
            self._preloaded_levels, self._preloaded_catalog = levels, catalog
            self.launcher.preload(preloads_of(self.settings, catalog))

    def _await_warm_up(self, life: Life) -> None:
        """Hold the tick while the launcher's fork server finishes warming, within bounds.

        A cold start pays a fresh interpreter's imports (1.5 to 2 s of CPU, more on a busy
        machine, where it also slows the warm-up it competes with), which is about as long
        as a warming server still needs: the first ticks of a service started with slots
        due paid both for nothing. The wait goes in slices, so a cancel ends it at once,
        and the decisions are asked after it; past `WARM_UP_WAIT` the tick starts cold.
        """
        deadline = time.monotonic() + WARM_UP_WAIT
        while self.launcher.warming() and life.reason is None and time.monotonic() < deadline:
            self.launcher.wait_ready(WARM_UP_SLICE)

    def ended_cancelled(self, life: Life, reason: str) -> Ended:
        """The end of a life stopped before (or instead of) an attempt."""
        return Ended(TickCancelled(tick_id=life.ref.tick_id, level=life.ref.level, reason=reason))

    def watch(self, ref: TickRef, process: TickProcess, remaining: float) -> TickOutcome:
        """Watch a tick adopted after a restart to its deadline and record its end."""
        life = Life(ref, process=process)
        with self._lock:
            self._lives[ref.tick_id] = life
        try:
            ended = self.await_end(life, process, remaining)
        finally:
            with self._lock:
                self._lives.pop(ref.tick_id, None)
        self.record(ended.event)
        _drop_if_empty(ref.log_path)
        self.alert_governor(ref)
        return _outcome(ref, ended)

    def await_end(self, life: Life, process: TickProcess, remaining: float) -> Ended:
        """Wait for a started tick until its deadline, stop it, and say how it ended."""
        ref = life.ref
        try:
            exit_code = process.wait(max(remaining, 0.0))
            timed_out = exit_code is None
            if timed_out:
                self._stop(process)
            self._leave_no_survivor(process)
        finally:
            with self._lock:
                life.process = None
                cancelled = life.reason
        self.book_cut_off_call(ref)
        if cancelled is not None:
            return Ended(TickCancelled(tick_id=ref.tick_id, level=ref.level, reason=cancelled))
        return self.terminal(ref, exit_code, timed_out)

    def running(self) -> list[TickRef]:
        """Ticks this runner owns right now: running an attempt, or between two."""
        with self._lock:
            return [life.ref for life in self._lives.values()]

    def cancel(self, tick_id: str, reason: str = "cancelled by operator") -> bool:
        """Stop a tick this runner owns: it ends TickCancelled and starts no further attempt.

        A running attempt's worker gets SIGTERM, grace, SIGKILL of its group; a backoff
        ends at once. Returns False when no such tick lives here (it ended, or never
        started here), or its worker has just exited and its end is being decided.
        """
        with self._lock:
            life = self._lives.get(tick_id)
            if life is None or life.reason is not None:
                return False
            process = life.process
            if process is not None and not process.alive():
                return False
            life.stop(reason)
        if process is not None:
            self._stop_soon(process)
        return True

    def _stop_soon(self, process: TickProcess) -> None:
        threading.Thread(target=self._stop, args=(process,), daemon=True).start()

    def _stop(self, process: TickProcess) -> None:
        # The tree is taken before the signal: a worker that dies of it leaves its CLI's
        # tools (in groups of their own) orphaned, found by neither its group nor its tree.
        tree = process.descendants()
        process.signal_group(signal.SIGTERM)
        if process.wait(self.settings.runner.grace_seconds) is None:
            process.kill_group(tree + process.descendants())
            process.wait(None)
        else:
            process.kill_group(tree)

    def book_cut_off_call(self, ref: TickRef) -> None:
        """Book, estimated, the call a worker that left no result may have had in flight.

        Called once the worker's process group is gone (`harness.execution.cutoff`). The
        rate-limit slots it may have held go back too, on whichever host it ran.
        """
        if self.store is None or ref.result_path.exists():
            return
        try:
            release_tick(self.store, ref.tick_id)
            events = self.store.read_stream(tick_stream(ref.tick_id))
        except StoreError:
            return  # the worker's own events may be spooled too: nothing to decide from
        for spent in cut_off_calls(events, PriceBook(self.settings.prices)):
            self.record(spent)

    def _counts(self, result: TickResult) -> dict[str, int]:
        """The completed tick's calls and tokens as every view gives them.

        Counted from its stream (`harness.projections.count_calls`: every attempt, a call
        cut off in an earlier one too); from this attempt's result while the store is out.
        """
        try:
            events = (
                [] if self.store is None else self.store.read_stream(tick_stream(result.tick_id))
            )
        except StoreError:
            events = []
        counts = count_calls(events)
        if not events:
            usage, tools = result.usage, result.tool_calls
            counts = CallCounts(
                model_calls=usage.model_calls,
                tool_calls=tools.executed,
                tool_calls_cancelled=tools.cancelled,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
            )
        return {
            "prompt_tokens": counts.prompt_tokens,
            "completion_tokens": counts.completion_tokens,
            "model_calls": counts.model_calls,
            "tool_calls": counts.tool_calls,
            "tool_calls_cancelled": counts.tool_calls_cancelled,
        }

    def terminal(self, ref: TickRef, exit_code: int | None, timed_out: bool) -> Ended:
        """The terminal event a tick has earned, from the clock and its result file alone."""
        ids = {"tick_id": ref.tick_id, "level": ref.level}
        path = str(ref.result_path)
        if timed_out:
            timed = TickTimedOut(
                **ids,
                timeout_seconds=ref.timeout,
                result_path=path,
                stderr_tail=_tail(ref.log_path),
            )
            return Ended(timed)
        try:
            result = read_result(ref.result_path)
        except ResultFileError as exc:
            reason = f"{exc} (worker exit code {exit_code})"
            return Ended(TickFailed(**ids, reason=reason, stderr_tail=_tail(ref.log_path)))
        if result.tick_id != ref.tick_id:
            reason = f"result file {path} belongs to tick {result.tick_id!r}"
            return Ended(TickFailed(**ids, reason=reason, result_path=path), result)
        if result.ok:
            completed = TickCompleted(
                **ids, result_path=path, stop_reason=result.stop_reason, **self._counts(result)
            )
            return Ended(completed, result)
        error = result.error
        failed = TickFailed(
            **ids,
            reason=f"{error.type}: {error.message}" if error else "worker reported failure",
            failure_class=error.failure_class if error else "internal",
            stderr_tail=_tail(ref.log_path),
            result_path=path,
        )
        return Ended(failed, result)

    def _leave_no_survivor(self, process: TickProcess) -> None:
        """Kill whatever the worker left in its group (a shell tool's child, say)."""
        deadline = time.monotonic() + 5
        while process.survivors():
            process.kill_group()
            if time.monotonic() > deadline:
                raise RuntimeError(f"process group {process.pid} survives SIGKILL")
            time.sleep(0.02)

    def record(self, event: TickEvent) -> None:
        """Append a tick's event now, or spool it when the store is out of reach."""
        append_or_spool(self.store, self.spool, event.stream_id, [event.to_record()])

    def record_level(self, event: LevelPaused | LevelResumed) -> None:
        """Record a level's pause or resume, spooled like the tick's events."""
        append_or_spool(self.store, self.spool, level_stream(event.level), [event.to_record()])


def _tail(path: Path) -> str:
    """The log's last bytes; "" unless it is a regular file (a tick may swap its log)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as log:
            size = os.fstat(log.fileno())
            if not stat.S_ISREG(size.st_mode):
                return ""
            log.seek(max(0, size.st_size - STDERR_TAIL_BYTES))
            return log.read(STDERR_TAIL_BYTES).decode(errors="replace")
    except OSError:
        return ""


def _drop_if_empty(path: Path) -> None:
    """Remove a log the worker wrote nothing to: a healthy tick leaves no empty file.

    At a thousand ticks a minute empty logs are a million inodes a day. A retry opens
    the log again (appending), so one that said something keeps every attempt's words.
    """
    with contextlib.suppress(OSError):
        if os.stat(path, follow_symlinks=False).st_size == 0:
            path.unlink()


def _failure(end: TickEvent) -> tuple[FailureClass, str] | None:
    """The failure class and reason of an attempt's end; None when it did not fail.

    A whole-tick timeout is an infrastructure failure (a hung upstream, as the predecessor
    call layer counted it): it is retried, and pauses the level when the retries are spent.
    """
    if isinstance(end, TickTimedOut):
        return "infrastructure", f"timed out after {end.timeout_seconds:g} s"
    if isinstance(end, TickFailed):
        return end.failure_class, end.reason
    return None


def _outcome(ref: TickRef, ended: Ended) -> TickOutcome:
    terminal = ended.event
    status = {
        TickCompleted.type: "completed",
        TickTimedOut.type: "timed_out",
        TickCancelled.type: "cancelled",
    }.get(terminal.type, "failed")
    reason = terminal.reason if isinstance(terminal, TickFailed | TickCancelled) else None
    return TickOutcome(
        ref.tick_id, ref.level, status, reason, ended.result, ref.result_path, ref.log_path
    )
