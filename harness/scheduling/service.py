"""`tickwork run`: fires every level on its schedule and hands its ticks to an executor.

The timetable wakes at the earliest next slot of any level and fires every slot due
together as one wave: one snapshot of the store (paused levels, levels with a tick in
flight) decides what each slot becomes (`harness.scheduling.waves`), and one transaction
claims them all, so replicas on one store run each slot once and a thousand levels due at
:00 are claimed in milliseconds, not one commit each. Ticks that may run go to the
executor it was given (`harness.scheduling.handoff`), which queues and runs them.

On stop (SIGTERM), firing ends at once; the executor ends queued ticks cancelled and
gives running ones `shutdown_grace_seconds`; a second request cancels them at once.
Before the first slot and then every few seconds, `harness.scheduling.reconcile` ends or
adopts what a killed process of this host left. A store outage is ridden out
(`harness.scheduling.outage`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import suppress
from datetime import datetime, timedelta
from functools import partial

from apscheduler.triggers.base import BaseTrigger

from harness import interruptible
from harness.config import LevelConfig, Settings
from harness.contracts import LevelBudgetExceeded, TickSkipped, level_stream, utcnow
from harness.prices import PriceBook
from harness.projections import (
    TickInFlight,
    last_slots,
    paused_levels,
    projector_for,
    ticks_in_flight,
)
from harness.routing import Router, configured_router
from harness.scheduling.backfill import Backfilling, BackfillRunner, open_ranges
from harness.scheduling.budget import BudgetCheck, Budgets
from harness.scheduling.capacity import CapacityWatch, SlotHolders
from harness.scheduling.control import ControlFollower
from harness.scheduling.forecast import run_forecast
from harness.scheduling.handoff import Handoff
from harness.scheduling.jitter import FireTimes
from harness.scheduling.limits import RunLimits
from harness.scheduling.log_feed import LogFeed
from harness.scheduling.outage import Outage, OwedSlots, Report
from harness.scheduling.overlap import OverlapBuffer
from harness.scheduling.reconcile import RECONCILE_SECONDS, reconcile
from harness.scheduling.reload import LevelsReload, levels_revision
from harness.scheduling.timetable import Slot, Timetable
from harness.scheduling.triggers import ScheduleEnded, level_trigger, next_slot, slot_tick_id
from harness.scheduling.waves import (
    DISPLACING,
    SKIPPED,
    Decision,
    SkipReason,
    SlotClaim,
    claim_wave,
    decide,
    missed_slots,
    skip_reason,
)
from harness.store import EventStore, Spool, StoreError, append_or_spool

Companion = Callable[[threading.Event], None]
"""Work beside the firing (the digest publisher): runs in a thread until the event is set."""

MAX_MISSED = 1000
WAVE = 1000
"""Slots claimed in one transaction at most (a long catch-up is claimed in several)."""
WAVE_GAP = 0.1
"""Seconds between the starts of two waves at least: jittered slots due within it are
claimed together (a claim per wave, not per slot), each at most this much later."""
JUST_DUE = timedelta(seconds=5)
MISSED_HORIZON = timedelta(days=1)


class Service:
    """The scheduler a `tickwork run` process is: fires slots, claims waves, hands ticks on."""

    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        executor: Handoff,
        report: Report,
        router: Router | None = None,
        companions: Sequence[Companion] = (),
        budgets: Budgets | None = None,
    ) -> None:
        """Raises CatalogError when no router is given and `[routing] catalog` is invalid.

        `budgets`: shared with the companions that watch them (`BudgetWatch`), so a reload
        that changes the rules changes them for both.
        """
        self.settings = settings
        self.store = store
        self.executor = executor
        self.report = report
        self.router = router or configured_router(settings)
        self.companions = companions
        self.triggers = self._runnable_triggers(settings.levels, {})
        self.fire_times = FireTimes(settings)
        self.run_limits = RunLimits(settings, report)
        self.stopping = threading.Event()
        self.threads: set[threading.Thread] = set()
        """Buffered ticks waiting for their level, and the companions."""
        self._threads_lock = threading.Lock()
        self.prices = PriceBook(settings.prices)
        self.projector = projector_for(store, self.prices)
        self.budgets = budgets or Budgets(
            store, self.projector, self.prices, settings, router=self.router
        )
        self.budget_flagged: set[tuple[str, str]] = set()
        """(level, day) whose LevelBudgetExceeded is known to be recorded."""
        self.control = ControlFollower(store, executor, settings.levels)
        self.outage = Outage(report)
        self.capacity = CapacityWatch(report)
        """Warns when the levels ask for more starts than the executor allows."""
        self.overlap = OverlapBuffer(
            store,
            executor,
            lambda level: self._in_flight([level]),
            self.stopping,
            self._track,
            self.outage.failed,
            report,
        )
        """Ticks buffered by their level's overlap policy until the ticks ahead of them end."""
        self._firing = threading.Lock()
        """One wave at a time: the timetable's and the backfills' decide on one snapshot."""
        self.backfills = BackfillRunner(
            settings,
            store,
            self.fire,
            lambda: self.projector.catch_up(["ticks"]),
            self.stopping,
            self._track,
            report,
        )
        self.reconciled_at = float("-inf")
        self.owed = OwedSlots(report)
        self.spool = Spool(settings.paths.spool)
        self.feed = LogFeed(
            store,
            self.prices,
            report,
            lambda: self.settings.levels,
            workers=settings.executor.kind == "procrastinate",
        )
        self.start_boundary: datetime | None = None
        """Where `serve` left the slots of the last few seconds to the loop's first batch."""
        self.config_revision = levels_revision(settings.levels)
        """The levels' revision each claim records; a reload moves it on."""
        self.timetable: Timetable | None = None
        self.reload: LevelsReload | None = None
        """Set by `tickwork run`'s wiring: takes the file's levels anew (SIGHUP, edits)."""
        self.crashed = False
        """Whether `serve` ended on an unexpected error rather than a stop."""

    def take_levels(self, levels: dict[str, LevelConfig], retimed: Collection[str]) -> None:
        """Every part of the service takes reloaded levels; the timetable retimes `retimed`.

        Called on the timetable's own thread (`LevelsReload.poll`), between two waves.
        """
        self.settings.replace_levels(levels)
        self.config_revision = levels_revision(levels)
        self.fire_times.take(self.settings)
        self.run_limits.take(self.settings)
        kept = {name: trigger for name, trigger in self.triggers.items() if name not in retimed}
        self.triggers = self._runnable_triggers(levels, kept)
        self.control.levels = self.settings.levels
        if self.router is not None:
            source = self.router.source
            source.needs_lane = frozenset(name for name, level in levels.items() if not level.model)
        if self.timetable is not None:
            self.timetable.retime(self.triggers, set(retimed), utcnow())
        self.capacity.check(self.settings, self.store)

    def _runnable_triggers(
        self, levels: dict[str, LevelConfig], kept: dict[str, BaseTrigger]
    ) -> dict[str, BaseTrigger]:
        """The triggers of the levels that can run here, `kept` ones where they are unchanged.

        A refused level (`Settings.refused_levels`: its agent CLI is not installed) gets
        none, so no slot of it fires or is claimed, while the others run.
        """
        refused = self.settings.refused_levels()
        return {
            name: kept.get(name) or level_trigger(config)
            for name, config in levels.items()
            if name not in refused
        }

    def serve(self) -> None:
        """Fire slots until `stopping` is set, then shut down; returns when all is ended.

        An unexpected error of the loop ends it as a stop would, said in one line
        (`crashed`): the executor gives running ticks their grace, and the next start
        reconciles what is left open.
        """
        try:
            self._serve()
        except Exception as exc:
            self.crashed = True
            self.stopping.set()
            self.report(f"stopping: the scheduler's loop ended on an unexpected error, {exc!r}")
        self.shutdown()

    def _serve(self) -> None:
        self._reconcile()
        for companion in self.companions:
            self._track(threading.Thread(target=companion, args=(self.stopping,), daemon=True))
        # Slots of the last few seconds are left to the loop (a replica already running
        # fires them now); only older ones count as missed.
        boundary = self.start_boundary = utcnow() - JUST_DUE
        self.catch_up(boundary)
        timetable = self.timetable = Timetable(
            self.triggers, boundary, self.fire_times.fire_at, self.fire_times.delays()
        )
        levels = ", ".join(
            f"{name} (next {slot:%H:%M:%S})" for name, slot in timetable.upcoming.items()
        )
        self.report(f"tickwork running: {levels or 'no levels configured'}")
        for why in self.settings.refused_levels().values():
            self.report(f"refused, it does not run: {why}")
        self.capacity.check(self.settings, self.store)
        timetable.run(self.stopping, self._fire_due, wake=self._wake, gap_seconds=WAVE_GAP)

    def _fire_due(self, due: list[Slot]) -> None:
        """Fire what the timetable hands on; a slot it hands late follows catch-up policy.

        A slot is late when it fell due (at its jittered fire time) more than JUST_DUE
        ago: the loop was held up (a store call that hung in an outage, a wave that took
        long) and the slot is accounted for as a restart would account for it. Slots of
        the last JUST_DUE seconds run, so a busy second or two loses no slot; so do those
        of the first batch after start-up from its boundary on (`serve`), however long
        starting took.
        """
        now = utcnow()
        on_time_from = min(now - JUST_DUE, self.start_boundary or now)
        self.start_boundary = None
        fire_at = self.fire_times.fire_at
        late = {(slot, level) for slot, level in due if fire_at(level, slot) < on_time_from}
        missed = missed_slots(self.settings, due, now, fire_at) & late
        if late:
            self.report(
                f"{len(late)} slot(s) fell due while firing was held up: {len(missed)} missed"
            )
        self.fire(due, missed)

    def _wake(self) -> None:
        """Follow the control stream and, once the store answers again, ingest the spool.

        It also folds the waves claimed since the last wake into the ticks read model, at
        most once a poll: after the :00 wave, while idle rather than when the next wave is
        due; with jittered levels, once for the many small waves of half a second.
        """
        if self.reload is not None:
            self.reload.poll()
        try:
            self.projector.catch_up(["ticks"])
            self.follow_control()
            self.backfills.poll()
            self.feed.poll()
            self._ingest_spool()
            self.owed.settle_unsure(self.store, self._hand_on)
            self.owed.settle(self.settings, self._fire_missed, self.fire_times.fire_at)
            if time.monotonic() - self.reconciled_at >= RECONCILE_SECONDS:
                self._reconcile()
        except StoreError as exc:
            self.outage.failed(exc)
        else:
            self.outage.over()

    def _ingest_spool(self) -> None:
        """Append what this host's processes spooled while the store was out.

        Raises:
            StoreError: the store cannot take it yet (the files stay for the next look).
        """
        if self.spool.files():
            ingested = self.spool.ingest(self.store)
            self.report(f"ingested {ingested.appended} spooled append(s)")

    def _reconcile(self) -> None:
        """End what dead processes of this host left open: a duty for as long as it runs."""
        reconcile(self.store, self.executor, self.projector, self.report)
        self.reconciled_at = time.monotonic()

    def follow_control(self) -> None:
        """Act on operator requests appended to the control stream since we last looked.

        Raises:
            StoreError: the store cannot be read (the next call asks again).
        """
        for request in self.control.poll():
            self.overlap.cancel(request.matches, request.reason)

    def catch_up(self, now: datetime) -> None:
        """Account for the slots levels missed while no scheduler ran.

        Each missed slot since a level's last claimed one is claimed and recorded as
        skipped (`missed`), except the latest, which runs when it lies within the level's
        catch-up window (a level with `catch_up_budget = "fit"`: every one in the window,
        as far as its budgets pay, `_fit_budget`). At most MAX_MISSED slots of the last
        MISSED_HORIZON are written per level; older ones are only counted. Slots in an
        open backfill's range are the backfill's to claim.
        """
        self.projector.catch_up(["ticks"])
        slots_claimed = last_slots(self.store, self.triggers)
        due: list[Slot] = []
        behind: list[tuple[str, list[datetime]]] = []
        backfilling = open_ranges(self.store)
        for level, trigger in self.triggers.items():
            if level not in slots_claimed:
                continue
            last = slots_claimed[level]
            if last < now - MISSED_HORIZON:
                horizon = now - MISSED_HORIZON
                self.report(f"{level}: slots missed before {horizon:%Y-%m-%d %H:%M} not recorded")
                last = horizon
            slots = []
            ranges = backfilling.get(level, ())
            with suppress(ScheduleEnded):
                slot = next_slot(trigger, last, last)
                while self.fire_times.fire_at(level, slot) < now:
                    if not any(start <= slot < end for start, end in ranges):
                        slots.append(slot)
                    slot = next_slot(trigger, slot, slot)
            if not slots:
                continue
            if len(slots) > MAX_MISSED:
                self.report(f"{level}: {len(slots) - MAX_MISSED} older missed slot(s) not recorded")
            due.extend((slot, level) for slot in slots[-MAX_MISSED:])
            behind.append((level, slots))
        recorded = missed_slots(self.settings, due, now, self.fire_times.fire_at)
        for level, slots in behind:
            if self.settings.levels[level].catch_up_budget == "fit":
                continue  # its line says how far its budgets pay (`_fit_budget`)
            runs = (slots[-1], level) not in recorded
            self.report(
                f"{level}: {len(slots)} slot(s) missed while down"
                + (f", the latest ({slots[-1]:%H:%M:%S}) runs now" if runs else "")
            )
        self._fire_missed(due, recorded, now)

    def _fire_missed(
        self, due: Sequence[Slot], missed: Collection[Slot], now: datetime | None = None
    ) -> None:
        """Fire slots that fell due while no scheduler ran or the store was out.

        `missed` as the catch-up policy has it (`missed_slots`), but for levels whose
        `catch_up_budget` is `fit`: they catch up as far as their budgets pay.
        """
        now = now or utcnow()
        ordered, skipped = list(due), set(missed)
        reasons: dict[Slot, SkipReason] = {}
        fitting: dict[str, list[datetime]] = {}
        for slot, level in due:
            if self.settings.levels[level].catch_up_budget == "fit":
                fitting.setdefault(level, []).append(slot)
        for level, slots in fitting.items():
            self._fit_budget(level, sorted(slots), now, ordered, skipped, reasons)
        self.fire(ordered, skipped, reasons=reasons)

    def _fit_budget(
        self,
        level: str,
        slots: list[datetime],
        now: datetime,
        due: list[Slot],
        missed: set[Slot],
        reasons: dict[Slot, SkipReason],
    ) -> None:
        """Catch up as far as the budgets pay: `catch_up_budget = "fit"` (edits the lists).

        Every missed slot within `catch_up_seconds` runs, newest first (so they go first in
        `due`), as far as the level's forecast tick fits its budgets; the rest are skipped
        `budget_forecast`, and one line says how many and why.
        """
        window = timedelta(seconds=self.settings.levels[level].catch_up_seconds)
        fire_at = self.fire_times.fire_at
        recent = [slot for slot in reversed(slots) if now - fire_at(level, slot) <= window]
        if not recent:
            self.report(f"{level}: {len(slots)} slot(s) missed, none within catch-up")
            return
        forecast = run_forecast(self.budgets, level, recent, now)
        runs, left = recent[: forecast.fits], recent[forecast.fits :]
        missed.difference_update((slot, level) for slot in runs)
        missed.update((slot, level) for slot in left)
        reasons.update(((slot, level), "budget_forecast") for slot in left)
        ours = {(slot, level) for slot in recent}
        due[:] = [each for each in due if each not in ours] + [(s, level) for s in recent]
        why = f": {forecast.crossings[0].words()}" if forecast.crossings and left else ""
        self.report(
            f"{level}: {len(slots)} slot(s) missed, {len(recent)} within catch-up; "
            f"{len(runs)} run now, newest first, {len(left)} skipped (budget_forecast) at "
            f"{forecast.tick.tokens:,} tokens a tick ({forecast.tick.source}){why}"
        )

    def fire(
        self,
        due: Sequence[Slot],
        missed: Collection[Slot] = (),
        backfill: Backfilling | None = None,
        reasons: Mapping[Slot, SkipReason] | None = None,
    ) -> None:
        """Decide and claim due slots, a wave at a time, and hand on the ticks that may run.

        `missed`: slots of `due` to record as skipped without a decision: `missed`, or the
        reason `reasons` gives one (`budget_forecast`).
        `backfill`: the backfill claiming them, whose overlap policy decides instead of
        the level's; its ticks are tagged with its id.
        """
        for start in range(0, len(due), WAVE):
            if self.stopping.is_set():
                return
            wave = due[start : start + WAVE]
            try:
                with self._firing:
                    self._fire_wave(wave, missed, backfill, reasons or {})
            except StoreError as exc:
                self.outage.failed(exc)
                if backfill is None:  # a backfill claims what is left itself, later
                    self.owed.owe(wave)

    def _fire_wave(
        self,
        wave: Sequence[Slot],
        missed: Collection[Slot],
        backfill: Backfilling | None = None,
        reasons: Mapping[Slot, SkipReason] | None = None,
    ) -> None:
        wave = self.run_limits.within(
            self.store, wave, missed, partial(self.projector.catch_up, ["ticks"])
        )
        levels = {level for _, level in wave}
        paused = paused_levels(self.store, levels)
        flying = self._in_flight(levels)
        busy = {t.level for t in flying}
        ahead: dict[str, list[str]] = {}
        """Level -> its ticks in flight, and this wave's that will run: what a new one is behind."""
        for tick in flying:
            ahead.setdefault(tick.level, []).append(tick.tick_id)
        held = self.budgets.held() if any(map(self.budgets.has_budget, levels)) else {}
        holding = self.overlap.holder(flying)
        holders = SlotHolders(
            flying, lambda: self._in_flight(self.settings.levels), self.settings, utcnow()
        )
        over_budget: dict[str, BudgetCheck] = {}
        plans: list[tuple[SlotClaim, Decision]] = []
        displacing: dict[str, list[str]] = {}
        for slot, level in wave:
            tick_id = slot_tick_id(level, slot)
            config = self.settings.levels[level]
            if backfill is not None:
                config = config.model_copy(update={"overlap": backfill.overlap})
            if (slot, level) in missed:
                decision: Decision = (reasons or {}).get((slot, level), "missed")
            else:
                decision = decide(
                    level,
                    config,
                    paused,
                    busy,
                    holding,
                    partial(self.budgets.try_reserve, level, tick_id, held),
                    over_budget,
                )
            behind = tuple(ahead.get(level, ()))
            claim = SlotClaim(
                tick_id,
                level,
                slot,
                skip_reason(decision),
                self.budgets.reserved(level, tick_id),
                self.router.route(level, slot) if self.router else None,
                config=config,
                config_revision=self.config_revision,
                buffered=behind if decision == "buffer" else None,
                policy=config.overlap,
                backfill=backfill.backfill_id if backfill else None,
                fire_at=self.fire_times.fire_at(level, slot),
                held=holders.words(level) if decision == "overlap" else None,
            )
            plans.append((claim, decision))
            if decision in ("run", "buffer"):
                if config.overlap in DISPLACING and behind:
                    displacing[tick_id] = list(behind)
                ahead.setdefault(level, []).append(tick_id)
            if decision == "buffer":
                self.overlap.reserve(claim)
        try:
            claimed = claim_wave(self.store, self.settings, [claim for claim, _ in plans])
        except StoreError:
            self.owed.unsure_of(plans)
            for claim, _ in plans:
                self.overlap.release(claim)
            raise
        finally:
            for claim, _ in plans:
                self.budgets.settle(claim.level, claim.tick_id)
        for claim, decision in plans:
            tick_id, level = claim.tick_id, claim.level
            if tick_id not in claimed:
                self.overlap.release(claim)
                self.report(f"{tick_id} claimed by another replica")
            elif (
                decision in ("run", "buffer")
                and not (refused := self._confirmed(claim, over_budget)).allowed
            ):
                self.overlap.release(claim)
                self.report(f"{tick_id} skipped: {refused.words(level)}")
            elif decision in ("run", "buffer"):
                if tick_id in displacing:
                    try:
                        self.overlap.displace(claim, displacing[tick_id])
                    except StoreError as exc:
                        self.outage.failed(exc)
                self._hand_on(claim, decision)
            elif decision == "budget":
                self.report(f"{tick_id} skipped: {over_budget[level].words(level)}")
            elif decision == "overlap":
                self.report(f"{tick_id} skipped: {claim.held}")
            else:
                self.report(f"{tick_id} skipped: {SKIPPED[decision].format(level=level)}")
        for level, check in over_budget.items():
            self._budget_exceeded(level, check)

    def _confirmed(self, claim: SlotClaim, over_budget: dict[str, BudgetCheck]) -> BudgetCheck:
        """Whether the claimed tick keeps its place within the level's budget; else it ends.

        A tick that gives way (or whose check cannot be read: fail-closed) is skipped
        `budget`, its end spooled if the store is out; the check says which budget.
        """
        try:
            check = self.budgets.confirm(claim.level, claim.tick_id)
        except StoreError as exc:
            self.outage.failed(exc)
            check = BudgetCheck(False, 0, None, 0)
        if check.allowed:
            return check
        if check.spent_tokens or check.reserved_tokens:
            over_budget.setdefault(claim.level, check)
        skipped = TickSkipped(
            tick_id=claim.tick_id, level=claim.level, reason="budget", slot=claim.slot
        )
        append_or_spool(self.store, self.spool, skipped.stream_id, [skipped.to_record()])
        return check

    def _hand_on(self, claim: SlotClaim, decision: Decision) -> None:
        """A claimed tick that may run goes to the executor, or waits for its level."""
        if decision == "buffer":
            self.overlap.hold(claim)
        else:
            self.report(f"{claim.tick_id} scheduled")
            self.executor.submit(claim)

    def _budget_exceeded(self, level: str, budget: BudgetCheck) -> None:
        """One LevelBudgetExceeded per level and UTC day, however many slots are skipped."""
        day = utcnow().date().isoformat()
        if (level, day) in self.budget_flagged:
            return
        stream = level_stream(level)
        history = self.store.read_streams([stream], types=[LevelBudgetExceeded.type])[stream]
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

    def _in_flight(self, levels: Collection[str]) -> list[TickInFlight]:
        """Ticks of `levels`, in any replica, that have not ended.

        Ticks scheduled longer ago than a timeout plus grace are ignored: their scheduler
        died before recording an end, and they must not block the level for ever.
        """
        self.projector.catch_up(["ticks"])
        now, grace = utcnow(), self.settings.runner.grace_seconds + 60
        configs = self.settings.levels
        default = LevelConfig.model_fields["timeout_seconds"].default  # a level reloaded away
        return [
            tick
            for tick in ticks_in_flight(self.store, levels)
            if tick.scheduled_at is not None
            and now - tick.scheduled_at
            < timedelta(
                seconds=(c.timeout_seconds if (c := configs.get(tick.level)) else default) + grace
            )
        ]

    def _track(self, thread: threading.Thread) -> None:
        """Start (if need be) and track a thread; it is never seen tracked but unstarted."""
        with self._threads_lock:
            self.threads = {t for t in self.threads if t.is_alive()}
            self.threads.add(thread)
            if thread.ident is None:
                thread.start()

    def _join_threads(self, deadline: float | None) -> list[threading.Thread]:
        """Join the tracked threads until `deadline` (monotonic); returns those still alive."""
        while True:
            with self._threads_lock:
                pending = list(self.threads)
            alive = [t for t in pending if t.is_alive()]
            if not alive:
                return []
            for thread in alive:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                interruptible.join(thread, left)
            if deadline is not None and time.monotonic() >= deadline:
                return [t for t in alive if t.is_alive()]

    def wait_idle(self, timeout: float) -> None:
        """Wait until nothing is held, queued or running (for callers driving `fire`)."""
        deadline = time.monotonic() + timeout
        if self._join_threads(deadline):
            raise TimeoutError(f"ticks still held after {timeout} s")
        self.executor.wait_idle(max(0.0, deadline - time.monotonic()))

    def shutdown(self) -> None:
        """Stop the executor within the shutdown grace and wait for every held tick's thread.

        What ticks spooled since the last look is ingested on the way out, so a stop with
        the store answering leaves nothing in the spool for the next start to find.
        """
        self.executor.shutdown(self.settings.runner.shutdown_grace_seconds)
        self._join_threads(None)
        try:
            self._ingest_spool()
            self.feed.poll()
        except StoreError as exc:
            self.report(f"spooled events stay for the next start: {exc}")
        self.report("tickwork stopped")
