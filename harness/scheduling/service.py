"""`tickwork run`: fires every level on its schedule and runs its ticks under a global cap.

The loop sleeps until the earliest next slot of any level, then fires every slot due
together as one wave: one snapshot of the store (paused levels, levels with a tick in
flight) decides what each slot becomes (run, buffered, or skipped: missed, paused,
overlap, budget), and one transaction claims them all, so replicas on one store run each
slot once and a thousand levels due at :00 are claimed in milliseconds, not one commit
each. Ticks that may run wait in the gate's queue (global and per-level caps, priorities,
spaced starts) as plain items; one dispatcher thread starts each when it gets a place.

On stop (SIGTERM), firing ends at once; queued ticks never start and end cancelled;
running ticks get `shutdown_grace_seconds` to finish and are then cancelled. Before the
first slot, `harness.scheduling.reconcile` ends or adopts what a killed predecessor left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Literal

from harness.config import Settings
from harness.contracts.events import (
    CONTROL_STREAM,
    CancelRequested,
    LevelBudgetExceeded,
    TickFailed,
    decode,
    level_stream,
    utcnow,
)
from harness.digests.publish import DigestScheduler, Publisher
from harness.execution.queue import Gate
from harness.execution.runner import Runner, SkipReason, SlotClaim, TickSetupError
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.projections.levels import paused_levels
from harness.projections.ticks import TickInFlight, last_slots, ticks_in_flight
from harness.scheduling.budget import BudgetCheck, Budgets
from harness.scheduling.reconcile import reconcile
from harness.scheduling.triggers import level_trigger, next_slot, slot_tick_id
from harness.store import SqlEventStore, StoreError

Report = Callable[[str], None]
Slot = tuple[datetime, str]
"""A slot time and its level."""
Decision = SkipReason | Literal["run", "buffer"]

IN_FLIGHT = ("scheduled", "running")
CONTROL_POLL_SECONDS = 0.5
MAX_MISSED = 1000
WAVE = 1000
"""Slots claimed in one transaction at most (a long catch-up is claimed in several)."""
JUST_DUE = timedelta(seconds=5)
MISSED_HORIZON = timedelta(days=1)
SKIPPED = {
    "missed": "missed while no scheduler ran",
    "paused": "{level} is paused (tickwork resume {level})",
    "overlap": "a tick of {level} is still in flight",
    "budget": "{level} is at its daily budget",
}


class Service:
    def __init__(
        self, settings: Settings, store: SqlEventStore, runner: Runner, report: Report
    ) -> None:
        self.settings = settings
        self.store = store
        self.runner = runner
        self.report = report
        self.triggers = {name: level_trigger(level) for name, level in settings.levels.items()}
        self.gate: Gate[SlotClaim] = Gate(
            settings.runner.max_concurrent,
            {name: level.max_concurrent for name, level in settings.levels.items()},
            settings.runner.start_spacing_seconds,
        )
        self.stopping = threading.Event()
        self.threads: set[threading.Thread] = set()
        self._threads_lock = threading.Lock()
        self.prices = PriceBook(settings.prices)
        self.projector = projector_for(store, self.prices)
        self.budgets = Budgets(store, self.projector, self.prices)
        self.buffered: dict[str, SlotClaim] = {}
        """Level -> the one tick held back until the level's tick in flight ends."""
        self.cancelled_buffered: dict[str, str] = {}
        self.budget_flagged: set[tuple[str, str]] = set()
        """(level, day) whose LevelBudgetExceeded is known to be recorded."""
        self.control_position = store.stream_version(CONTROL_STREAM)
        self._dispatcher = threading.Thread(target=self._dispatch, name="dispatch", daemon=True)

    def serve(self) -> None:
        """Fire slots until `stopping` is set, then shut down; returns when all is ended."""
        for watcher in reconcile(self.store, self.runner, self.projector, self.report):
            self._track(watcher)
        if self.settings.digests:
            # A projector of its own: the digest thread folds while the loop fires.
            projector = projector_for(self.store, self.prices)
            publisher = Publisher(self.settings, self.store, projector, self.prices, self.report)
            digests = DigestScheduler(self.settings, publisher, self.report)
            self._track(threading.Thread(target=digests.run, args=(self.stopping,), daemon=True))
        # Slots of the last few seconds are left to the loop (a replica already running
        # fires them now); only older ones count as missed.
        boundary = utcnow() - JUST_DUE
        self.catch_up(boundary)
        upcoming = {
            name: next_slot(trigger, None, boundary) for name, trigger in self.triggers.items()
        }
        levels = ", ".join(f"{name} (next {slot:%H:%M:%S})" for name, slot in upcoming.items())
        self.report(f"tickwork running: {levels or 'no levels configured'}")
        while not self.stopping.is_set():
            self.follow_control()
            if not upcoming:
                self.stopping.wait(CONTROL_POLL_SECONDS)
                continue
            now = utcnow()
            due = sorted((slot, level) for level, slot in upcoming.items() if slot <= now)
            if not due:
                delay = (min(upcoming.values()) - now).total_seconds()
                self.stopping.wait(min(delay, CONTROL_POLL_SECONDS))
                continue
            self.fire(due)
            for slot, level in due:
                upcoming[level] = next_slot(self.triggers[level], slot, utcnow())
            # Fold the wave just claimed now, while idle, not when the next wave is due.
            self.projector.catch_up(["ticks"])
        self.shutdown()

    def follow_control(self) -> None:
        """Act on operator requests appended to the control stream since we last looked."""
        try:
            requests = self.store.read_stream(CONTROL_STREAM, after=self.control_position)
        except StoreError as exc:
            self.report(f"control stream unreadable: {exc}")
            return
        for stored in requests:
            self.control_position = stored.stream_position
            request = decode(stored)
            if not isinstance(request, CancelRequested):
                continue
            reason = f"cancelled by {request.by} (scope {request.scope!r})"

            def matches(tick: SlotClaim, request: CancelRequested = request) -> bool:
                return request.matches(tick.level, tick.tick_id)

            for tick in self.gate.withdraw(matches):
                self._never_started(tick, reason)
            with self._threads_lock:
                for tick in self.buffered.values():
                    if matches(tick):
                        self.cancelled_buffered[tick.tick_id] = reason
            for ref in self.runner.running():
                if request.matches(ref.level, ref.tick_id) and self.runner.cancel(
                    ref.tick_id, reason
                ):
                    self.report(f"{ref.tick_id} cancelling: {reason}")

    def catch_up(self, now: datetime) -> None:
        """Account for the slots levels missed while no scheduler ran.

        Each missed slot since a level's last claimed one is claimed and recorded as
        skipped (`missed`), except the latest, which runs when it lies within the level's
        catch-up window. At most MAX_MISSED slots of the last MISSED_HORIZON are written
        per level; older ones are only counted.
        """
        self.projector.catch_up(["ticks"])
        with self.store.read_transaction() as conn:
            slots_claimed = last_slots(conn)
        due: list[Slot] = []
        missed: set[Slot] = set()
        for level, trigger in self.triggers.items():
            if level not in slots_claimed:
                continue
            last = slots_claimed[level]
            if last < now - MISSED_HORIZON:
                horizon = now - MISSED_HORIZON
                self.report(f"{level}: slots missed before {horizon:%Y-%m-%d %H:%M} not recorded")
                last = horizon
            slots = []
            slot = next_slot(trigger, last, last)
            while slot < now:
                slots.append(slot)
                slot = next_slot(trigger, slot, slot)
            if not slots:
                continue
            window = timedelta(seconds=self.settings.levels[level].catch_up_seconds)
            run_latest = now - slots[-1] <= window
            if len(slots) > MAX_MISSED:
                self.report(f"{level}: {len(slots) - MAX_MISSED} older missed slot(s) not recorded")
            due.extend((slot, level) for slot in slots[-MAX_MISSED:])
            missed.update((slot, level) for slot in slots[-MAX_MISSED:])
            if run_latest:
                missed.discard((slots[-1], level))
            self.report(
                f"{level}: {len(slots)} slot(s) missed while down"
                + (f", the latest ({slots[-1]:%H:%M:%S}) runs now" if run_latest else "")
            )
        self.fire(due, missed)

    def fire(self, due: Sequence[Slot], missed: Collection[Slot] = ()) -> None:
        """Decide and claim due slots, a wave at a time, and queue the ticks that may run.

        `missed`: slots of `due` to record as skipped (`missed`) without a decision.
        """
        if self._dispatcher.ident is None:
            self._dispatcher.start()
        for start in range(0, len(due), WAVE):
            if self.stopping.is_set():
                return
            try:
                self._fire_wave(due[start : start + WAVE], missed)
            except StoreError as exc:
                self.report(f"{len(due[start : start + WAVE])} slot(s) not scheduled: {exc}")

    def _fire_wave(self, wave: Sequence[Slot], missed: Collection[Slot]) -> None:
        levels = {level for _, level in wave}
        paused = paused_levels(self.store, levels)
        flying = self._in_flight(levels)
        busy = {t.level for t in flying}
        budgeted = [level for level in levels if self.settings.levels[level].has_budget]
        held = self.budgets.held(flying, budgeted)
        over_budget: dict[str, BudgetCheck] = {}
        plans: list[tuple[SlotClaim, Decision]] = []
        for slot, level in wave:
            tick_id = slot_tick_id(level, slot)
            if (slot, level) in missed:
                decision: Decision = "missed"
            else:
                decision = self._decide(
                    level, tick_id, paused, busy, held.get(level, 0), over_budget
                )
            claim = SlotClaim(
                tick_id,
                level,
                slot,
                _skip_reason(decision),
                self.budgets.reserved(level, tick_id),
                self.runner.route(level, slot),
            )
            plans.append((claim, decision))
            if decision == "buffer":
                with self._threads_lock:
                    self.buffered[level] = claim
        try:
            claimed = self.runner.claim_wave([claim for claim, _ in plans])
        finally:
            for claim, _ in plans:
                self.budgets.settle(claim.level, claim.tick_id)
        for claim, decision in plans:
            tick_id, level = claim.tick_id, claim.level
            if tick_id not in claimed:
                with self._threads_lock:
                    if self.buffered.get(level) is claim:
                        del self.buffered[level]
                self.report(f"{tick_id} claimed by another replica")
            elif decision == "buffer":
                self.report(f"{tick_id} buffered until the tick of {level} in flight ends")
                self._track(threading.Thread(target=self._hold, args=(claim,), daemon=True))
            elif decision == "run":
                self.report(f"{tick_id} scheduled")
                if not self.gate.put(level, self.settings.levels[level].priority, claim):
                    self._never_started(claim, None)
            elif decision != "missed":
                self.report(f"{tick_id} skipped: {SKIPPED[decision].format(level=level)}")
        for level, check in over_budget.items():
            self._budget_exceeded(level, check)

    def _decide(
        self,
        level: str,
        tick_id: str,
        paused: set[str],
        busy: set[str],
        held: int,
        over_budget: dict[str, BudgetCheck],
    ) -> Decision:
        """What a due slot becomes; `busy` gains the level when its tick will run."""
        config = self.settings.levels[level]
        if level in paused:
            return "paused"
        decision: Decision = "run"
        if config.overlap != "allow" and level in busy:
            with self._threads_lock:
                if config.overlap != "buffer_one" or level in self.buffered:
                    return "overlap"
            decision = "buffer"
        budget = self.budgets.try_reserve(level, config, tick_id, held)
        if not budget.allowed:
            over_budget.setdefault(level, budget)
            return "budget"
        busy.add(level)
        return decision

    def _budget_exceeded(self, level: str, budget: BudgetCheck) -> None:
        """One LevelBudgetExceeded per level and UTC day, however many slots are skipped."""
        day = utcnow().date().isoformat()
        if (level, day) in self.budget_flagged:
            return
        stream = level_stream(level)
        history = self.store.read_streams([stream], types=["LevelBudgetExceeded"])[stream]
        if not any(e.data["day"] == day for e in history):
            event = LevelBudgetExceeded(
                level=level,
                day=day,
                spent_tokens=budget.spent_tokens,
                spent_usd=budget.spent_usd,
                reserved_tokens=budget.reserved_tokens,
            )
            self.store.append(stream, [event.to_record()])
        self.budget_flagged.add((level, day))

    def _in_flight(self, levels: Collection[str], but: str | None = None) -> list[TickInFlight]:
        """Ticks of `levels`, in any replica, that have not ended (other than `but`).

        Ticks scheduled longer ago than a timeout plus grace are ignored: their scheduler
        died before recording an end, and they must not block the level for ever.
        """
        self.projector.catch_up(["ticks"])
        now, grace = utcnow(), self.settings.runner.grace_seconds + 60
        return [
            tick
            for tick in ticks_in_flight(self.store, levels)
            if tick.tick_id != but
            and tick.scheduled_at is not None
            and now - tick.scheduled_at
            < timedelta(seconds=self.settings.levels[tick.level].timeout_seconds + grace)
        ]

    def _hold(self, tick: SlotClaim) -> None:
        """A buffered tick waits until no other tick of its level is in flight, then queues."""
        tick_id, level = tick.tick_id, tick.level
        try:
            while self._in_flight([level], but=tick_id):
                with self._threads_lock:
                    reason = self.cancelled_buffered.pop(tick_id, None)
                if reason is not None or self.stopping.is_set():
                    self._never_started(tick, reason)
                    return
                time.sleep(CONTROL_POLL_SECONDS)
            if not self.gate.put(level, self.settings.levels[level].priority, tick):
                self._never_started(tick, None)
        finally:
            with self._threads_lock:
                self.buffered.pop(level, None)
                self.threads.discard(threading.current_thread())

    def _dispatch(self) -> None:
        """Start each queued tick when the gate gives it a place, until the gate closes."""
        while (taken := self.gate.take()) is not None:
            _, tick = taken
            self._track(threading.Thread(target=self._run, args=(tick,), daemon=True))

    def _track(self, thread: threading.Thread) -> None:
        """Start (if need be) and track a thread; it is never seen tracked but unstarted."""
        with self._threads_lock:
            self.threads.add(thread)
            if thread.ident is None:
                thread.start()

    def _run(self, claim: SlotClaim) -> None:
        tick_id, level = claim.tick_id, claim.level
        try:
            try:
                tick = self.runner.prepare(
                    level, tick_id=tick_id, slot=claim.slot, routed=claim.routed
                )
            except TickSetupError as exc:
                reason = f"the tick could not be prepared: {exc}"
                self.runner.record(TickFailed(tick_id=tick_id, level=level, reason=reason))
                self.report(f"{tick_id} failed ({reason})")
                return
            outcome = self.runner.run(tick, claimed=True)
            detail = f" ({outcome.reason})" if outcome.reason else ""
            self.report(f"{outcome.tick_id} {outcome.status}{detail}")
        finally:
            self.gate.release(level)
            with self._threads_lock:
                self.threads.discard(threading.current_thread())

    def _never_started(self, tick: SlotClaim, reason: str | None) -> None:
        """End a queued tick that must not start (cancelled, or the service stops)."""
        tick_id = tick.tick_id
        reason = reason or "service stopped before the tick could start"
        self.runner.cancel_queued(tick_id, tick.level, reason)
        self.report(f"{tick_id} cancelled before it started: {reason}")

    def wait_idle(self, timeout: float) -> None:
        """Wait until nothing is queued, held or running (for callers driving `fire`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._threads_lock:
                pending = list(self.threads)
            if not pending and not self.gate.queued() and not self.gate.running():
                return
            for thread in pending:
                thread.join(max(0.0, deadline - time.monotonic()))
            time.sleep(0.05)
        raise TimeoutError(f"ticks still queued or running after {timeout} s")

    def shutdown(self) -> None:
        for tick in self.gate.close():
            self._never_started(tick, None)
        if self._dispatcher.ident is not None:
            self._dispatcher.join()  # its last tick, if any, is tracked before it returns
        grace = self.settings.runner.shutdown_grace_seconds
        with self._threads_lock:
            pending = list(self.threads)
        if pending:
            self.report(f"stopping: {len(pending)} tick(s) get {grace:.0f} s to finish")
        deadline = utcnow() + timedelta(seconds=grace)
        for thread in pending:
            thread.join(max(0.0, (deadline - utcnow()).total_seconds()))
        for ref in self.runner.running():
            self.runner.cancel(ref.tick_id, "service stopped")
        for thread in pending:
            thread.join()
        self.report("tickwork stopped")


def _skip_reason(decision: Decision) -> SkipReason | None:
    if decision == "run" or decision == "buffer":
        return None
    return decision
