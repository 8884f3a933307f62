"""The runner owns a tick's life: payload, launch, deadline, cancel, kill, one terminal event.

Every tick stream ends in exactly one terminal event, whatever the worker did: the runner
decides it from the clock and the result file alone (a missing or corrupt file is a
failure with that reason). At the deadline the whole process group gets SIGTERM, a grace
period, then SIGKILL, and the runner checks that no process of the group is left.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from tenacity import RetryCallState, Retrying, stop_never, wait_exponential

from harness.config import LevelConfig, Settings
from harness.contracts.events import (
    LevelPaused,
    LevelResumed,
    TickAttemptFailed,
    TickCancelled,
    TickCompleted,
    TickEvent,
    TickFailed,
    TickScheduled,
    TickSkipped,
    TickStarted,
    TickTimedOut,
    level_stream,
    tick_stream,
)
from harness.contracts.payload import RagSettings, TickPayload
from harness.contracts.result import ResultFileError, TickResult, read_result
from harness.execution.launchers import Launcher, TickProcess, launcher_for
from harness.execution.prompt import previous_result_text, render
from harness.prices import PriceBook
from harness.projections import Projector, projector_for
from harness.routing.decisions import Escalation, Routed, Router, configured_router, decision_fields
from harness.store import (
    Spool,
    SqlEventStore,
    StoreUnavailableError,
    append_or_spool,
)

SkipReason = Literal["overlap", "budget", "missed", "paused"]
DEFAULT_TOOL_BUDGETS = {"min": 30, "hour": 300}
FALLBACK_TOOL_BUDGET = 30
STDERR_TAIL_BYTES = 2000


class TickSetupError(Exception):
    """The tick cannot be started as asked (unknown level, no model, bad override)."""


def tool_budget(level: str, config: LevelConfig, env: Mapping[str, str]) -> int:
    """`TICKWORK_MAX_TOOL_CALLS_<LEVEL>` > `TICKWORK_MAX_TOOL_CALLS` > config > default."""
    for name in (f"TICKWORK_MAX_TOOL_CALLS_{level.upper()}", "TICKWORK_MAX_TOOL_CALLS"):
        if name in env:
            try:
                value = int(env[name])
            except ValueError:
                raise TickSetupError(f"{name}={env[name]!r} is not a whole number") from None
            if value < 0:
                raise TickSetupError(f"{name}={value} must not be negative")
            return value
    if config.max_tool_calls is not None:
        return config.max_tool_calls
    return DEFAULT_TOOL_BUDGETS.get(level, FALLBACK_TOOL_BUDGET)


def new_tick_id(level: str) -> str:
    return f"{level}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class TickRef:
    """What the runner needs to end a tick: enough to rebuild from its TickStarted event."""

    tick_id: str
    level: str
    result_path: Path
    log_path: Path
    timeout: float


@dataclass(frozen=True)
class PreparedTick:
    payload: TickPayload
    timeout: float
    log_path: Path
    slot: datetime | None = None
    routed: Routed | None = None

    @property
    def ref(self) -> TickRef:
        payload = self.payload
        return TickRef(
            payload.tick_id, payload.level, payload.result_path, self.log_path, self.timeout
        )


@dataclass(frozen=True)
class SlotClaim:
    """A slot's tick as a scheduler claims it: no payload yet.

    The payload (and its prompt, which may quote the level's previous result) is built
    when the tick gets a place to run, not when its slot fires: a queued tick must not
    start with a result that was stale while it waited.
    """

    tick_id: str
    level: str
    slot: datetime | None
    skip: SkipReason | None = None
    """Claimed and ended at once, without running."""
    reserved_tokens: int = 0
    """Held against the level's daily budget while the tick is in flight."""
    routed: Routed | None = None
    """The catalog's decision for the slot, recorded in TickScheduled and run as decided."""

    def scheduled(self, level_model: str | None) -> TickScheduled:
        """The claim's TickScheduled; the model is the first candidate's, if routed."""
        first = self.routed.plan.candidates[0] if self.routed else None
        return TickScheduled(
            tick_id=self.tick_id,
            level=self.level,
            model=first.model if first else level_model,
            slot=self.slot,
            reserved_tokens=self.reserved_tokens,
            **(decision_fields(self.routed) if self.routed else {}),
        )


@dataclass(frozen=True)
class TickOutcome:
    tick_id: str
    level: str
    status: str
    """completed, failed, timed_out or cancelled."""
    reason: str | None
    result: TickResult | None
    result_path: Path
    log_path: Path


class Runner:
    def __init__(
        self,
        settings: Settings,
        store: SqlEventStore | None,
        launcher: Launcher | None = None,
        env: Mapping[str, str] | None = None,
        router: Router | None = None,
    ) -> None:
        """Raises CatalogError when `[routing] catalog` is set and invalid."""
        self.settings = settings
        self.store = store
        self.launcher = launcher or launcher_for(settings)
        self.env = dict(os.environ if env is None else env)
        self.spool = Spool(settings.paths.spool)
        self._lock = threading.Lock()
        self._running: dict[str, tuple[TickRef, TickProcess]] = {}
        self._cancelled: dict[str, str] = {}
        self._projector: Projector | None = None
        self.router = router or configured_router(settings)

    def prepare(
        self,
        level: str,
        prompt: str | None = None,
        timeout: float | None = None,
        tick_id: str | None = None,
        slot: datetime | None = None,
        routed: Routed | None = None,
    ) -> PreparedTick:
        """The tick's payload; `routed`: the decision its slot was claimed with, if any."""
        config = self.settings.levels.get(level)
        if config is None:
            known = ", ".join(self.settings.levels) or "none"
            raise TickSetupError(f"no level named {level!r} in the configuration (known: {known})")
        routed = routed or self.route(level, slot or datetime.now(UTC))
        first = routed.plan.candidates[0] if routed else None
        if not config.model and first is None:
            raise TickSetupError(f"levels.{level}.model is not set: a tick needs a model")
        if timeout is not None and timeout <= 0:
            raise TickSetupError(f"timeout must be positive, not {timeout}")
        tick_id = tick_id or new_tick_id(level)
        folder = self.settings.paths.results / level / datetime.now(UTC).strftime("%Y-%m-%d")
        rag_on = config.rag and self.env.get("TICKWORK_RAG_DISABLED", "") not in ("1", "true")
        payload = TickPayload(
            tick_id=tick_id,
            level=level,
            prompt=prompt if prompt is not None else self._prompt(level, config, slot),
            instructions=config.instructions,
            model=first.model if first else config.model,
            effort=first.effort if first else config.effort,
            max_tool_calls=tool_budget(level, config, self.env),
            can_shell=config.can_shell,
            rag=RagSettings(
                enabled=rag_on,
                index_path=self.settings.rag.index.absolute(),
                k=self.settings.rag.k,
                timeout_seconds=self.settings.rag.timeout_seconds,
            ),
            result_path=(folder / f"{tick_id}.json").absolute(),
            store_url=self.settings.store.url,
            durability=self.settings.store.durability,
            spool_dir=self.settings.paths.spool.absolute(),
            route=routed.plan if routed else None,
            governor=self.settings.governor.limits(),
        )
        return PreparedTick(
            payload,
            timeout or config.timeout_seconds,
            (folder / f"{tick_id}.log").absolute(),
            slot,
            routed,
        )

    def _prompt(self, level: str, config: LevelConfig, slot: datetime | None) -> str:
        template = config.prompt
        if config.prompt_file is not None:
            try:
                template = config.prompt_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise TickSetupError(
                    f"levels.{level}.prompt_file {config.prompt_file}: {exc.strerror}"
                ) from exc
        previous = ""
        if "$previous_result" in template and self.store is not None:
            if self._projector is None:
                self._projector = projector_for(self.store, PriceBook(self.settings.prices))
            previous = previous_result_text(self.store, self._projector, level)
        return render(template, level, slot, previous)

    def route(self, level: str, at: datetime) -> Routed | None:
        """The catalog's decision for a tick of `level` at `at` (None: no catalog or lane)."""
        return self.router.route(level, at) if self.router else None

    def claim(self, tick: PreparedTick) -> bool:
        """Record TickScheduled as the first event of the tick's stream, or lose the race.

        A slot's tick id is the same in every replica, so of two schedulers on one store
        exactly one claims each slot; the loser records nothing and starts nothing.
        """
        payload = tick.payload
        claim = SlotClaim(payload.tick_id, payload.level, tick.slot, routed=tick.routed)
        return bool(self.claim_wave([claim]))

    def claim_wave(self, wave: Sequence[SlotClaim]) -> set[str]:
        """Claim many slots in one transaction; returns the tick ids claimed here.

        A slot already decided skipped is claimed and ended in the same write.
        """
        if self.store is None:
            raise StoreUnavailableError("no store: slots cannot be claimed")
        streams = {}
        for claim in wave:
            config = self.settings.levels.get(claim.level)
            events: list[TickEvent] = [claim.scheduled(config.model if config else None)]
            if claim.skip is not None:
                events.append(
                    TickSkipped(
                        tick_id=claim.tick_id, level=claim.level, reason=claim.skip, slot=claim.slot
                    )
                )
            streams[tick_stream(claim.tick_id)] = [event.to_record() for event in events]
        created = self.store.create_streams(streams)
        return {claim.tick_id for claim in wave if tick_stream(claim.tick_id) in created}

    def cancel_queued(self, tick_id: str, level: str, reason: str) -> None:
        """End a claimed tick that never started: it waited for a place, the service stopped."""
        self.record(TickCancelled(tick_id=tick_id, level=level, reason=reason))

    def run(self, tick: PreparedTick, claimed: bool = False) -> TickOutcome:
        """Run a prepared tick to its end, retrying failed attempts as its class allows.

        Infrastructure failures get `infra_retries` more attempts with exponential backoff;
        when they are spent the level is paused (fail-closed) until an operator resumes it.
        Content failures get `content_retries`. Each failed attempt that is tried again is
        recorded as `TickAttemptFailed`; only the last attempt's end is terminal.
        """
        if not claimed:
            claim = SlotClaim(
                tick.payload.tick_id, tick.payload.level, tick.slot, routed=tick.routed
            )
            self.record(claim.scheduled(tick.payload.model))
        policy = self.settings.runner
        backoff = wait_exponential(
            multiplier=policy.retry_backoff_seconds, max=policy.retry_backoff_max_seconds
        )

        escalation = Escalation(tick.payload, tick.routed, self.record)

        def again(state: RetryCallState) -> bool:
            end = state.outcome.result() if state.outcome else None
            if not isinstance(end, TickFailed):
                return False
            allowed = {"infrastructure": policy.infra_retries, "content": policy.content_retries}
            retries = state.attempt_number - escalation.first_attempt
            return retries < allowed.get(end.failure_class, 0) or escalation.promote(
                end, state.attempt_number
            )

        def note_retry(state: RetryCallState) -> None:
            end = state.outcome.result() if state.outcome else None
            assert isinstance(end, TickFailed)
            delay = state.next_action.sleep if state.next_action else 0.0
            self.record(
                TickAttemptFailed(
                    tick_id=end.tick_id,
                    level=end.level,
                    attempt=state.attempt_number,
                    failure_class=end.failure_class,
                    reason=end.reason,
                    retry_in_seconds=delay,
                )
            )

        attempts = Retrying(
            retry=again,
            stop=stop_never,
            wait=backoff,
            before_sleep=note_retry,
            retry_error_callback=lambda state: state.outcome.result() if state.outcome else None,
        )
        terminal: TickEvent = attempts(
            lambda: self._attempt(replace(tick, payload=escalation.payload), attempts)
        )
        self.record(terminal)
        if isinstance(terminal, TickFailed) and terminal.failure_class == "infrastructure":
            reason = f"{tick.payload.tick_id} failed on infrastructure after retries: "
            self.record_level(
                LevelPaused(level=tick.payload.level, reason=reason + terminal.reason)
            )
        return _outcome(tick.ref, terminal)

    def _attempt(self, tick: PreparedTick, attempts: Retrying) -> TickEvent:
        payload = tick.payload
        payload.result_path.unlink(missing_ok=True)  # an earlier attempt's must not count
        process = self.launcher.start(payload.model_dump_json().encode(), tick.log_path, self.env)
        self.record(
            TickStarted(
                tick_id=payload.tick_id,
                level=payload.level,
                pid=process.pid,
                host=socket.gethostname(),
                attempt=attempts.statistics.get("attempt_number", 1),
                runner_pid=os.getpid(),
                result_path=str(payload.result_path),
                log_path=str(tick.log_path),
                timeout_seconds=tick.timeout,
            )
        )
        return self._await_end(tick.ref, process, tick.timeout)

    def watch(self, ref: TickRef, process: TickProcess, remaining: float) -> TickOutcome:
        """Watch a tick adopted after a restart to its deadline and record its end."""
        terminal = self._await_end(ref, process, remaining)
        self.record(terminal)
        return _outcome(ref, terminal)

    def _await_end(self, ref: TickRef, process: TickProcess, remaining: float) -> TickEvent:
        """Wait for a started tick until its deadline, stop it, and say how it ended."""
        with self._lock:
            self._running[ref.tick_id] = (ref, process)
        try:
            exit_code = process.wait(max(remaining, 0.0))
            timed_out = exit_code is None
            if timed_out:
                self._stop(process)
            self._leave_no_survivor(process)
        finally:
            with self._lock:
                self._running.pop(ref.tick_id, None)
                cancelled = self._cancelled.pop(ref.tick_id, None)
        if cancelled is not None:
            return TickCancelled(tick_id=ref.tick_id, level=ref.level, reason=cancelled)
        return self.terminal(ref, exit_code, timed_out)

    def running(self) -> list[TickRef]:
        """Ticks whose process this runner watches right now."""
        with self._lock:
            return [ref for ref, _ in self._running.values()]

    def cancel(self, tick_id: str, reason: str = "cancelled by operator") -> bool:
        """Stop a running tick (SIGTERM, grace, SIGKILL of its group): it ends TickCancelled.

        Returns False when no such tick is running here (it ended, or never started).
        """
        with self._lock:
            entry = self._running.get(tick_id)
            if entry is None or not entry[1].alive():
                return False
            process = entry[1]
            self._cancelled[tick_id] = reason
        threading.Thread(target=self._stop, args=(process,), daemon=True).start()
        return True

    def _stop(self, process: TickProcess) -> None:
        process.signal_group(signal.SIGTERM)
        if process.wait(self.settings.runner.grace_seconds) is None:
            process.kill_group()
            process.wait(None)

    def terminal(self, ref: TickRef, exit_code: int | None, timed_out: bool) -> TickEvent:
        """The terminal event a tick has earned, from the clock and its result file alone."""
        ids = {"tick_id": ref.tick_id, "level": ref.level}
        path = str(ref.result_path)
        if timed_out:
            return TickTimedOut(**ids, timeout_seconds=ref.timeout, result_path=path)
        try:
            result = read_result(ref.result_path)
        except ResultFileError as exc:
            reason = f"{exc} (worker exit code {exit_code})"
            return TickFailed(**ids, reason=reason, stderr_tail=_tail(ref.log_path))
        if result.tick_id != ref.tick_id:
            reason = f"result file {path} belongs to tick {result.tick_id!r}"
            return TickFailed(**ids, reason=reason, result_path=path)
        if result.ok:
            return TickCompleted(
                **ids,
                result_path=path,
                stop_reason=result.stop_reason,
                prompt_tokens=result.usage.prompt_tokens,
                completion_tokens=result.usage.completion_tokens,
                model_calls=result.usage.model_calls,
                tool_calls=result.tool_calls.executed,
                tool_calls_cancelled=result.tool_calls.cancelled,
            )
        error = result.error
        return TickFailed(
            **ids,
            reason=f"{error.type}: {error.message}" if error else "worker reported failure",
            failure_class=error.failure_class if error else "internal",
            stderr_tail=_tail(ref.log_path),
            result_path=path,
        )

    def _leave_no_survivor(self, process: TickProcess) -> None:
        """Kill whatever the worker left in its group (a shell tool's child, say)."""
        deadline = time.monotonic() + 5
        while process.survivors():
            process.kill_group()
            if time.monotonic() > deadline:
                raise RuntimeError(f"process group {process.pid} survives SIGKILL")
            time.sleep(0.02)

    def record(self, event: TickEvent) -> None:
        append_or_spool(self.store, self.spool, event.stream_id, [event.to_record()])

    def record_level(self, event: LevelPaused | LevelResumed) -> None:
        append_or_spool(self.store, self.spool, level_stream(event.level), [event.to_record()])


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(max(0, os.path.getsize(path) - STDERR_TAIL_BYTES))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def _outcome(ref: TickRef, terminal: TickEvent) -> TickOutcome:
    status = {
        "TickCompleted": "completed",
        "TickTimedOut": "timed_out",
        "TickCancelled": "cancelled",
    }.get(terminal.type, "failed")
    result = None
    if isinstance(terminal, TickCompleted | TickFailed) and terminal.result_path:
        try:
            result = read_result(Path(terminal.result_path))
        except ResultFileError:
            result = None
    reason = terminal.reason if isinstance(terminal, TickFailed) else None
    return TickOutcome(
        ref.tick_id, ref.level, status, reason, result, ref.result_path, ref.log_path
    )
