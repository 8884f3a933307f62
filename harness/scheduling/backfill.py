"""Backfill: run the slots of a past range that have no tick yet, as ordinary ticks.

An operator records a request (`tickwork backfill LEVEL --from T --to T`, or `POST
/levels/{level}/backfill`) in the backfills stream; every running service follows that
stream and runs the open requests (`BackfillRunner`). A slot's claim is its tick's stream
(`slot_tick_id`), the same claim the timetable makes, so a slot that already has a tick is
left alone, two replicas split a range without running a slot twice, and a service killed
mid-way is followed by one that claims only what is left. Claims go through the service's
wave (`Service.fire`): the level's pause, daily budget, routing and concurrency caps apply,
and the ticks are tagged with the backfill's id (`TickScheduled.backfill`).

At most `max_at_once` of the range's ticks are in flight at once across replicas (read
from the ticks read model before each claim); `overlap` decides a slot whose level is busy
as a level's policy would (`buffer_all`: one after another in slot order; `allow`: side
by side; `skip`: recorded skipped). A cancel stops the claiming and cancels its ticks in
flight like any cancel scope; progress is read from the range's slots by primary key.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from harness.config import Settings
from harness.contracts import (
    BACKFILL_STREAM,
    CONTROL_STREAM,
    BackfillCancelled,
    BackfillFinished,
    BackfillRequested,
    CancelRequested,
    TickScheduled,
    decode,
    tick_stream,
)
from harness.projections import OPEN, tick_statuses, ticks_in_flight
from harness.scheduling.timetable import POLL_SECONDS, Slot
from harness.scheduling.triggers import level_trigger, slot_tick_id, slots_between
from harness.store import EventStore, StoreError

if TYPE_CHECKING:
    from harness.scheduling.budget import Budgets
    from harness.scheduling.forecast import Crossing, RunForecast

BackfillOverlap = Literal["buffer_all", "allow", "skip"]
MAX_SLOTS = 10_000
"""Slots one backfill may cover: its progress is read slot by slot."""
RECENT = 200
"""Events of the backfills stream read from its end: the backfills a service or a status
view considers (older ones are finished or cancelled long since)."""


class BackfillError(ValueError):
    """A backfill request or cancel that cannot be recorded; nothing was appended."""


class BackfillRefused(BackfillError):
    """A backfill its forecast says a budget would stop part way; nothing was appended."""

    def __init__(self, crossing: Crossing) -> None:
        super().__init__(
            f"refused: the forecast crosses {crossing.words()}; "
            "--force (the API's force) runs it anyway"
        )
        self.crossing = crossing


@dataclass(frozen=True)
class Backfilling:
    """What a wave needs of the backfill whose slots it claims."""

    backfill_id: str
    overlap: BackfillOverlap


@dataclass(frozen=True)
class Backfill:
    """A backfill as the recent window of its stream tells it."""

    request: BackfillRequested
    state: Literal["open", "cancelled", "finished"]

    @property
    def backfill_id(self) -> str:
        """The id the CLI, the API and the ticks' TickScheduled name it by."""
        return self.request.backfill_id


@dataclass(frozen=True)
class Progress:
    """How far a backfill's range is: slots claimed (by it or before it), in flight, ended."""

    slots: int
    claimed: int
    in_flight: int
    statuses: dict[str, int]
    """Ended ticks of the range by status (completed, failed, skipped, ...)."""

    @property
    def ended(self) -> int:
        """Slots whose tick has ended."""
        return self.claimed - self.in_flight


def range_slots(settings: Settings, level: str, start: datetime, end: datetime) -> list[datetime]:
    """The level's slots in [start, end), at most MAX_SLOTS + 1 (one more says: too many)."""
    return slots_between(level_trigger(settings.levels[level]), start, end, MAX_SLOTS + 1)


def _checked_slots(
    settings: Settings, level: str, start: datetime, end: datetime, max_at_once: int
) -> list[datetime]:
    """The range's slots, once the request is known to be one a service can run.

    Raises:
        BackfillError: unknown level, naive or empty range, a range in the future, too
            many slots, or `max_at_once` below 1.
    """
    if level not in settings.levels:
        known = ", ".join(settings.levels) or "none"
        raise BackfillError(f"level: no level named {level!r} (known: {known})")
    if start.tzinfo is None or end.tzinfo is None:
        raise BackfillError("from/to: give a time zone (e.g. 2026-12-01T00:00Z)")
    if end <= start:
        raise BackfillError(f"to: {end.isoformat()} is not after from ({start.isoformat()})")
    if max_at_once < 1:
        raise BackfillError(f"max: {max_at_once} must be at least 1")
    if end > datetime.now(start.tzinfo):
        raise BackfillError(f"to: {end.isoformat()} is in the future (the timetable fires those)")
    slots = range_slots(settings, level, start, end)
    if len(slots) > MAX_SLOTS:
        raise BackfillError(f"from/to: the range holds more than {MAX_SLOTS} slots of {level}")
    return slots


def forecast_backfill(
    budgets: Budgets, level: str, start: datetime, end: datetime, max_at_once: int = 1
) -> RunForecast:
    """What a backfill of `level`'s slots in [start, end) would run and cost, from now.

    The slots it would run are those with no tick yet (looked up by key); the ticks and
    tick_spend read models must be current (the caller's projector).

    Raises:
        BackfillError: as `request_backfill` (nothing is appended either way).
    """
    slots = _checked_slots(budgets.settings, level, start, end, max_at_once)
    return _forecast(budgets, level, slots)


def _forecast(budgets: Budgets, level: str, slots: list[datetime]) -> RunForecast:
    from harness.scheduling.forecast import run_forecast  # budgets load routing: not for status

    ids = [slot_tick_id(level, slot) for slot in slots]
    claimed = tick_statuses(budgets.store, ids)
    left = [slot for slot, tick_id in zip(slots, ids, strict=True) if tick_id not in claimed]
    forecast = run_forecast(budgets, level, left, datetime.now(UTC))
    return replace(forecast, left_alone=len(slots) - len(left))


def request_backfill(
    settings: Settings,
    store: EventStore,
    level: str,
    start: datetime,
    end: datetime,
    *,
    overlap: BackfillOverlap = "buffer_all",
    max_at_once: int = 1,
    by: str,
    budgets: Budgets | None = None,
    force: bool = False,
) -> BackfillRequested:
    """Record a backfill of `level`'s slots in [start, end) for the running services.

    With `budgets` (the CLI's and the API's), a backfill whose forecast crosses a budget
    that stops slots is refused unless `force`: it would stop part way, the budget spent.

    Raises:
        BackfillError: unknown level, naive or empty range, a range in the future, too
            many slots, or `max_at_once` below 1 (nothing is appended).
        BackfillRefused: the forecast crosses a `stop` or `pause` budget, not forced.
    """
    slots = _checked_slots(settings, level, start, end, max_at_once)
    if budgets is not None and not force:
        refusing = _forecast(budgets, level, slots).refusing
        if refusing is not None:
            raise BackfillRefused(refusing)
    request = BackfillRequested(
        backfill_id=f"bf-{uuid.uuid4().hex[:10]}",
        level=level,
        start=start,
        end=end,
        overlap=overlap,
        max_at_once=max_at_once,
        slots=len(slots),
        by=by,
    )
    store.append(BACKFILL_STREAM, [request.to_record()])
    return request


def backfills(store: EventStore) -> list[Backfill]:
    """The backfills of the stream's last RECENT events, newest first."""
    after = max(0, store.stream_version(BACKFILL_STREAM) - RECENT)
    requests: dict[str, BackfillRequested] = {}
    ended: dict[str, Literal["cancelled", "finished"]] = {}
    for stored in store.read_stream(BACKFILL_STREAM, after=after):
        event = decode(stored)
        if isinstance(event, BackfillRequested):
            requests[event.backfill_id] = event
        elif isinstance(event, BackfillCancelled):
            ended[event.backfill_id] = "cancelled"
        elif isinstance(event, BackfillFinished):
            ended.setdefault(event.backfill_id, "finished")
    return [
        Backfill(request, ended.get(backfill_id, "open"))
        for backfill_id, request in reversed(requests.items())
    ]


SHOWN = 10
"""Backfills a status view shows with their progress: the newest, open or not."""


@dataclass(frozen=True)
class BackfillProgress:
    """A backfill and how far its range is, as `tickwork status` and `GET /status` show it."""

    backfill: Backfill
    progress: Progress


def recent_progress(settings: Settings, store: EventStore) -> list[BackfillProgress]:
    """The SHOWN newest backfills with their progress: reads bounded by their ranges."""
    return [
        BackfillProgress(each, backfill_progress(settings, store, each.request))
        for each in backfills(store)[:SHOWN]
    ]


def open_ranges(store: EventStore) -> dict[str, list[tuple[datetime, datetime]]]:
    """Level -> the ranges of its open backfills: slots there are theirs to claim.

    Catch-up after a restart leaves them alone: a backfill's claims move the level's last
    claimed slot, and the slots after it in the range are not missed but still to come.
    """
    ranges: dict[str, list[tuple[datetime, datetime]]] = {}
    for each in backfills(store):
        if each.state == "open":
            ranges.setdefault(each.request.level, []).append((each.request.start, each.request.end))
    return ranges


def backfill_ticks(settings: Settings, request: BackfillRequested) -> list[str]:
    """The tick ids of the range's slots, in slot order (the level must still exist)."""
    slots = range_slots(settings, request.level, request.start, request.end)
    return [slot_tick_id(request.level, slot) for slot in slots]


def backfill_progress(
    settings: Settings, store: EventStore, request: BackfillRequested
) -> Progress:
    """The range's slots as the ticks read model has them: one lookup per slot, by key."""
    if request.level not in settings.levels:
        return Progress(request.slots, 0, 0, {})
    found = tick_statuses(store, backfill_ticks(settings, request))
    statuses: dict[str, int] = {}
    for status in found.values():
        if status not in OPEN:
            statuses[status] = statuses.get(status, 0) + 1
    in_flight = sum(status in OPEN for status in found.values())
    return Progress(request.slots, len(found), in_flight, statuses)


def cancel_backfill(store: EventStore, backfill_id: str, by: str) -> list[str]:
    """Stop a backfill: no more slots are claimed, and its ticks in flight are cancelled.

    Each of its ticks in flight gets a cancel scope of its id (ending with the tick), so
    whichever replica or worker runs it ends it. Returns those tick ids.

    Raises:
        BackfillError: no open backfill has this id (nothing is appended).
    """
    known = {each.backfill_id: each for each in backfills(store)}
    if backfill_id not in known:
        raise BackfillError(f"backfill: no backfill named {backfill_id!r} among the recent ones")
    if known[backfill_id].state != "open":
        raise BackfillError(f"backfill: {backfill_id} is {known[backfill_id].state} already")
    store.append(BACKFILL_STREAM, [BackfillCancelled(backfill_id=backfill_id, by=by).to_record()])
    request = known[backfill_id].request
    flying = _its_ticks_in_flight(store, request)
    why = f"backfill {backfill_id} cancelled by {by}"
    cancels = [CancelRequested(scope=tick_id, by=by, why=why) for tick_id in flying]
    if cancels:
        store.append(CONTROL_STREAM, [cancel.to_record() for cancel in cancels])
    return flying


def _its_ticks_in_flight(store: EventStore, request: BackfillRequested) -> list[str]:
    """The backfill's ticks not ended yet: the range's open slots it claimed itself."""
    flying = [t.tick_id for t in ticks_in_flight(store, [request.level])]
    firsts = store.read_streams([tick_stream(t) for t in flying], types=[TickScheduled.type])
    return [
        tick_id
        for tick_id in flying
        if any(e.data.get("backfill") == request.backfill_id for e in firsts[tick_stream(tick_id)])
    ]


Fire = Callable[[Sequence[Slot], Collection[Slot], Backfilling], None]
"""The service's wave: decide and claim slots for a backfill, hand on what may run."""


class BackfillRunner:
    """Runs a service's share of the open backfills: a thread each, claiming what is left.

    `poll` (from the service's wake-up) starts a thread for each open backfill not run
    here yet; the thread claims the range's unclaimed slots in slot order, as many as
    `max_at_once` leaves room for, until every slot is claimed and ended (then records
    `BackfillFinished`, once whichever replica does), the backfill is cancelled, or the
    service stops.
    """

    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        fire: Fire,
        fold: Callable[[], object],
        stopping: threading.Event,
        track: Callable[[threading.Thread], None],
        report: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.store = store
        self.fire = fire
        self.fold = fold
        self.stopping = stopping
        self.track = track
        self.report = report
        self.running: dict[str, threading.Event] = {}
        """Backfill id -> set when it is cancelled: its thread stops claiming."""

    def poll(self) -> None:
        """Start the open backfills not running here, stop the cancelled ones.

        Raises:
            StoreError: the backfills stream cannot be read (the next poll asks again).
        """
        for each in backfills(self.store):
            stop = self.running.get(each.backfill_id)
            if each.state != "open":
                if stop is not None:
                    stop.set()
            elif stop is None and each.request.level in self.settings.levels:
                stop = self.running[each.backfill_id] = threading.Event()
                self.report(f"backfill {each.backfill_id} of {each.request.level}: running")
                self.track(
                    threading.Thread(target=self._run, args=(each.request, stop), daemon=True)
                )

    def _run(self, request: BackfillRequested, stop: threading.Event) -> None:
        backfilling = Backfilling(request.backfill_id, request.overlap)
        level = request.level
        slots = range_slots(self.settings, level, request.start, request.end)
        pending = {slot_tick_id(level, slot): slot for slot in slots}
        """The range's slots not seen ended: an end is final, so each look is shorter."""
        while not (stop.is_set() or self.stopping.is_set()):
            try:
                self.fold()
                found = tick_statuses(self.store, list(pending))
                in_flight = sum(status in OPEN for status in found.values())
                for tick_id, status in found.items():
                    if status not in OPEN:
                        del pending[tick_id]
                left = [slot for tick_id, slot in pending.items() if tick_id not in found]
                if not left and not in_flight:
                    self._finished(request)
                    return
                room = request.max_at_once - in_flight
                if left and room > 0:  # then a pause: a claim that keeps failing must not spin
                    self.fire([(slot, level) for slot in left[:room]], (), backfilling)
            except StoreError as exc:
                self.report(f"backfill {request.backfill_id}: store unavailable ({exc})")
            stop.wait(POLL_SECONDS)

    def _finished(self, request: BackfillRequested) -> None:
        """Record the end once, whichever replica sees it first: the event id is the id's."""
        finished = BackfillFinished(
            backfill_id=request.backfill_id,
            event_id=uuid.uuid5(uuid.NAMESPACE_URL, f"tickwork:{request.backfill_id}:finished"),
        )
        self.store.append(BACKFILL_STREAM, [finished.to_record()])
        self.report(f"backfill {request.backfill_id} of {request.level}: finished")
