"""`tickwork run`: fires every level on its schedule and runs its ticks under a global cap.

The loop sleeps until the earliest next slot of any level, then fires it: the slot is
claimed in the store (so replicas on one store run each slot once), checked for overlap
with a tick of the same level still in flight, and handed to a thread that waits at the
gate (global and per-level caps, priorities, spaced starts) and runs it through the runner. On stop
(SIGTERM), firing ends at once; running ticks get `shutdown_grace_seconds` to finish and
are then cancelled; ticks still waiting for a place never start and end cancelled.
Before the first slot, `harness.reconcile` ends or adopts what a killed predecessor left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from harness.budget import BudgetCheck, Budgets
from harness.config import Settings
from harness.events import (
    CONTROL_STREAM,
    CancelRequested,
    LevelBudgetExceeded,
    decode,
    level_stream,
)
from harness.gate import Gate
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.projections.ticks import ticks
from harness.reconcile import reconcile
from harness.runner import PreparedTick, Runner
from harness.schedule import level_trigger, next_slot, slot_tick_id
from harness.status import level_paused
from harness.store import SqlEventStore, StoreError

Report = Callable[[str], None]

IN_FLIGHT = ("scheduled", "running")
CONTROL_POLL_SECONDS = 0.5
MAX_MISSED = 1000
JUST_DUE = timedelta(seconds=5)
MISSED_HORIZON = timedelta(days=1)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Service:
    def __init__(
        self, settings: Settings, store: SqlEventStore, runner: Runner, report: Report
    ) -> None:
        self.settings = settings
        self.store = store
        self.runner = runner
        self.report = report
        self.triggers = {name: level_trigger(level) for name, level in settings.levels.items()}
        self.gate = Gate(
            settings.runner.max_concurrent,
            {name: level.max_concurrent for name, level in settings.levels.items()},
            settings.runner.start_spacing_seconds,
        )
        self.stopping = threading.Event()
        self.threads: set[threading.Thread] = set()
        self._threads_lock = threading.Lock()
        prices = PriceBook(settings.prices)
        self.projector = projector_for(store, prices)
        self.budgets = Budgets(store, self.projector, prices)
        self.waiting: dict[str, PreparedTick] = {}
        self.buffered: dict[str, str] = {}
        """Level -> the one tick held back until the level's tick in flight ends."""
        self.cancelled_waiting: dict[str, str] = {}
        self.control_position = store.stream_version(CONTROL_STREAM)

    def serve(self) -> None:
        """Fire slots until `stopping` is set, then shut down; returns when all is ended."""
        for watcher in reconcile(self.store, self.runner, self.projector, self.report):
            with self._threads_lock:
                self.threads.add(watcher)
        # Slots of the last few seconds are left to the loop (a replica already running
        # fires them now); only older ones count as missed.
        boundary = utcnow() - JUST_DUE
        for level in self.triggers:
            self.catch_up(level, boundary)
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
            # One read-model refresh for every slot due together (a wave at :00 can be a
            # thousand levels): each overlap check then reads it as of this moment.
            self.projector.catch_up(["ticks"])
            for slot, level in due:
                if self.stopping.is_set():
                    break
                self.fire(level, slot, fresh=True)
                upcoming[level] = next_slot(self.triggers[level], slot, utcnow())
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
            with self._threads_lock:
                for tick_id, tick in self.waiting.items():
                    if request.matches(tick.payload.level, tick_id):
                        self.cancelled_waiting[tick_id] = reason
            for ref in self.runner.running():
                if request.matches(ref.level, ref.tick_id) and self.runner.cancel(
                    ref.tick_id, reason
                ):
                    self.report(f"{ref.tick_id} cancelling: {reason}")

    def catch_up(self, level: str, now: datetime) -> None:
        """Account for the slots a level missed while no scheduler ran.

        Each missed slot since the level's last claimed one is claimed and recorded as
        skipped (`missed`), except the latest, which runs when it lies within the level's
        catch-up window. At most MAX_MISSED slots of the last MISSED_HORIZON are written;
        older ones are only counted.
        """
        self.projector.catch_up(["ticks"])
        with self.store.read_transaction() as conn:
            last = conn.execute(
                sa.select(sa.func.max(ticks.c.slot)).where(ticks.c.level == level)
            ).scalar()
        if last is None:
            return
        last = last if last.tzinfo else last.replace(tzinfo=UTC)
        trigger, missed = self.triggers[level], []
        if last < now - MISSED_HORIZON:
            horizon = now - MISSED_HORIZON
            self.report(f"{level}: slots missed before {horizon:%Y-%m-%d %H:%M} are not recorded")
            last = now - MISSED_HORIZON
        slot = next_slot(trigger, last, last)
        while slot < now:
            missed.append(slot)
            slot = next_slot(trigger, slot, slot)
        if not missed:
            return
        window = timedelta(seconds=self.settings.levels[level].catch_up_seconds)
        run_latest = now - missed[-1] <= window
        if len(missed) > MAX_MISSED:
            self.report(f"{level}: {len(missed) - MAX_MISSED} older missed slot(s) not recorded")
        for slot in missed[-MAX_MISSED:]:
            if slot == missed[-1] and run_latest:
                self.fire(level, slot)
                continue
            tick = self.runner.prepare(level, tick_id=slot_tick_id(level, slot), slot=slot)
            if self.runner.claim(tick):
                self.runner.skip(tick, "missed")
                self.report(f"{tick.payload.tick_id} skipped: missed while no scheduler ran")
        self.report(
            f"{level}: {len(missed)} slot(s) missed while down"
            + (f", the latest ({missed[-1]:%H:%M:%S}) runs now" if run_latest else "")
        )

    def fire(self, level: str, slot: datetime, fresh: bool = False) -> None:
        """Claim a slot and start its tick, unless paused, overlapping or over budget.

        `fresh`: the ticks read model was just brought up to date by the caller.
        """
        tick = self.runner.prepare(level, tick_id=slot_tick_id(level, slot), slot=slot)
        tick_id = tick.payload.tick_id
        try:
            if not self.runner.claim(tick):
                self.report(f"{tick_id} claimed by another replica")
                return
            if level_paused(self.store, level):
                self.runner.skip(tick, "paused")
                self.report(f"{tick_id} skipped: {level} is paused (tickwork resume {level})")
                return
            overlap = self.settings.levels[level].overlap
            if overlap != "allow" and self._in_flight(level, tick_id, fresh):
                with self._threads_lock:
                    buffer = overlap == "buffer_one" and level not in self.buffered
                    if buffer:
                        self.buffered[level] = tick_id
                if not buffer:
                    self.runner.skip(tick, "overlap")
                    self.report(f"{tick_id} skipped: a tick of {level} is still in flight")
                    return
                self.report(f"{tick_id} buffered until the tick of {level} in flight ends")
            budget = self.budgets.try_reserve(level, self.settings.levels[level], tick_id)
            if not budget.allowed:
                self.runner.skip(tick, "budget")
                self._budget_exceeded(level, budget)
                self.report(f"{tick_id} skipped: {level} is at its daily budget")
                return
        except StoreError as exc:
            self.report(f"{tick_id} not scheduled: {exc}")
            return
        self.report(f"{tick_id} scheduled")
        thread = threading.Thread(target=self._run, args=(tick,), name=tick_id, daemon=True)
        with self._threads_lock:
            self.threads.add(thread)
        thread.start()

    def _budget_exceeded(self, level: str, budget: BudgetCheck) -> None:
        """One LevelBudgetExceeded per level and UTC day, however many slots are skipped."""
        day = utcnow().date().isoformat()
        stream = level_stream(level)
        if any(
            e.type == "LevelBudgetExceeded" and e.data["day"] == day
            for e in self.store.read_stream(stream)
        ):
            return
        event = LevelBudgetExceeded(
            level=level,
            day=day,
            spent_tokens=budget.spent_tokens,
            spent_usd=budget.spent_usd,
            reserved_tokens=budget.reserved_tokens,
        )
        self.store.append(stream, [event.to_record()])

    def _in_flight(self, level: str, own_tick_id: str, fresh: bool = False) -> bool:
        """Whether another tick of the level, in any replica, has not ended.

        Ticks scheduled longer ago than a timeout plus grace are ignored: their scheduler
        died before recording an end, and they must not block the level for ever.
        """
        config = self.settings.levels[level]
        horizon = utcnow() - timedelta(
            seconds=config.timeout_seconds + self.settings.runner.grace_seconds + 60
        )
        if not fresh:
            self.projector.catch_up(["ticks"])
        query = sa.select(sa.func.count()).where(
            ticks.c.level == level,
            ticks.c.status.in_(IN_FLIGHT),
            ticks.c.tick_id != own_tick_id,
            ticks.c.scheduled_at > horizon,
        )
        with self.store.read_transaction() as conn:
            return bool(conn.execute(query).scalar())

    def _run(self, tick: PreparedTick) -> None:
        tick_id, level = tick.payload.tick_id, tick.payload.level
        with self._threads_lock:
            self.waiting[tick_id] = tick
        try:
            if not self._wait_for_level(level, tick_id):
                self._never_started(tick)
                return
            priority = self.settings.levels[level].priority
            if not self.gate.acquire(level, priority, lambda: self._must_not_start(tick_id)):
                self._never_started(tick)
                return
            try:
                with self._threads_lock:
                    self.waiting.pop(tick_id, None)
                outcome = self.runner.run(tick, claimed=True)
            finally:
                self.gate.release(level)
            detail = f" ({outcome.reason})" if outcome.reason else ""
            self.report(f"{outcome.tick_id} {outcome.status}{detail}")
        finally:
            self.budgets.settle(level, tick_id)
            with self._threads_lock:
                self.threads.discard(threading.current_thread())
                self.waiting.pop(tick_id, None)

    def _wait_for_level(self, level: str, tick_id: str) -> bool:
        """A buffered tick waits until no other tick of its level is in flight."""
        with self._threads_lock:
            if self.buffered.get(level) != tick_id:
                return True
        try:
            while self._in_flight(level, tick_id):
                if self._must_not_start(tick_id):
                    return False
                time.sleep(CONTROL_POLL_SECONDS)
            return True
        finally:
            with self._threads_lock:
                self.buffered.pop(level, None)

    def _must_not_start(self, tick_id: str) -> bool:
        with self._threads_lock:
            return tick_id in self.cancelled_waiting or self.stopping.is_set()

    def _never_started(self, tick: PreparedTick) -> None:
        """End a waiting tick that must not start (cancelled, or the service stops)."""
        tick_id = tick.payload.tick_id
        with self._threads_lock:
            reason = self.cancelled_waiting.pop(tick_id, None)
        reason = reason or "service stopped before the tick could start"
        self.runner.cancel_queued(tick, reason)
        self.report(f"{tick_id} cancelled before it started: {reason}")

    def shutdown(self) -> None:
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
