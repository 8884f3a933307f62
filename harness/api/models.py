"""What the HTTP API answers: pydantic models, so the OpenAPI schema says it too."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, Field

from harness.projections import TickInFlight
from harness.scheduling import (
    BackfillProgress,
    Capacity,
    Crossing,
    LevelStatus,
    RunForecast,
    Snapshot,
)
from harness.store import Beat, StoredEvent
from harness.timespec import as_utc

Utc = Annotated[datetime | None, AfterValidator(as_utc)]


class InFlight(BaseModel):
    """A tick in flight as the API shows it, with its wait and runtime worked out."""

    tick_id: str
    level: str
    status: str
    scheduled_at: datetime | None
    started_at: datetime | None
    waited_seconds: float | None
    """From scheduled to started (or to now, while it waits for a place)."""
    runtime_seconds: float | None

    @classmethod
    def of(cls, tick: TickInFlight, now: datetime) -> InFlight:
        """The API's form of a read-model row, with durations measured at `now`."""
        return cls(
            tick_id=tick.tick_id,
            level=tick.level,
            status=tick.status,
            scheduled_at=tick.scheduled_at,
            started_at=tick.started_at,
            waited_seconds=tick.waited(now),
            runtime_seconds=tick.runtime(now),
        )


class Process(BaseModel):
    """A scheduler or worker by its heartbeat, for `/status`."""

    role: str
    host: str
    pid: int
    started_at: datetime
    last_beat_at: datetime
    live: bool
    """Whether it beat recently enough to count as running."""

    @classmethod
    def of(cls, beat: Beat, now: datetime) -> Process:
        """The API's form of a heartbeat row, its liveness judged at `now`."""
        return cls(
            role=beat.role,
            host=beat.host,
            pid=beat.pid,
            started_at=beat.started_at,
            last_beat_at=beat.beat_at,
            live=beat.live(now),
        )


class Projection(BaseModel):
    """How far one read model has folded, for `/status`."""

    position: int
    lag: int
    """Events stored but not yet folded into this read model."""


class BackfillView(BaseModel):
    """A backfill and its progress: slots of the range claimed, in flight and ended."""

    backfill_id: str
    level: str
    start: datetime
    end: datetime
    overlap: str
    max_at_once: int
    by: str
    state: str
    """`open` (services claim its slots), `cancelled` or `finished`."""
    slots: int
    claimed: int
    in_flight: int
    ended: int
    statuses: dict[str, int]
    """Ended ticks of the range by status."""

    @classmethod
    def of(cls, shown: BackfillProgress) -> BackfillView:
        """A backfill's request, state and progress in the API's form."""
        request, progress = shown.backfill.request, shown.progress
        return cls(
            backfill_id=request.backfill_id,
            level=request.level,
            start=request.start,
            end=request.end,
            overlap=request.overlap,
            max_at_once=request.max_at_once,
            by=request.by,
            state=shown.backfill.state,
            slots=progress.slots,
            claimed=progress.claimed,
            in_flight=progress.in_flight,
            ended=progress.ended,
            statuses=progress.statuses,
        )


class BackfillBody(BaseModel):
    """What `POST /levels/{level}/backfill` takes: the range, as `tickwork backfill`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    start: AwareDatetime = Field(alias="from")
    end: AwareDatetime = Field(alias="to")
    overlap: Literal["buffer_all", "allow", "skip"] = "buffer_all"
    max: int = Field(default=1, ge=1, le=1000)
    dry_run: bool = False
    """Answer its forecast (slots, cost, budgets crossed) and record nothing."""
    force: bool = False
    """Record it even if its forecast crosses a `stop` or `pause` budget."""


class TickForecastView(BaseModel):
    """One tick's forecast cost and where it comes from."""

    tokens: int
    usd: float | None
    ticks: int
    """Ticks of the last 7 days it is the median of; 0: the level's reservation."""
    source: str


class BackfillForecast(BaseModel):
    """A backfill's dry run: `tickwork backfill --dry-run --json`, `POST ... dry_run`."""

    level: str
    slots: list[datetime]
    """The slots it would run: those of the range with no tick yet."""
    left_alone: int
    tick: TickForecastView
    tokens: int
    usd: float | None
    fits: int
    """Slots every budget holding the level can pay for."""
    crossings: list[Crossing]
    """Each budget it would pass: at which slot, after how many, and its figures."""
    refused_by: str | None
    """The budget that refuses it without `force` (a `stop` or `pause` one it crosses)."""

    @classmethod
    def of(cls, forecast: RunForecast) -> BackfillForecast:
        """The forecast in the API's form."""
        refusing = forecast.refusing
        return cls(
            level=forecast.level,
            slots=forecast.slots,
            left_alone=forecast.left_alone,
            tick=TickForecastView(**vars(forecast.tick), source=forecast.tick.source),
            tokens=forecast.tokens,
            usd=forecast.usd,
            fits=forecast.fits,
            crossings=forecast.crossings,
            refused_by=None if refusing is None else refusing.budget,
        )


class CapacityView(BaseModel):
    """The levels' demand beside what the executor can start (`harness.scheduling.Capacity`)."""

    demand_per_minute: float
    """Slots a minute the levels' schedules ask for (paused and refused levels aside)."""
    levels: int
    start_spacing_seconds: float
    """0: starts are not spaced (procrastinate workers)."""
    starts_per_minute: float | None
    """What the start spacing allows (None: not spaced)."""
    places: int | None
    """Ticks at once (None: the procrastinate workers' concurrency decides)."""
    run_seconds: float | None
    """How long the levels' ended ticks ran (each level's mean, weighted by its demand)."""
    ticks_per_minute_by_places: float | None
    warning: str | None
    """Why the service cannot keep up with its levels, when it cannot."""
    says: str

    @classmethod
    def of(cls, capacity: Capacity) -> CapacityView:
        """The capacity in the API's form."""
        return cls(
            demand_per_minute=capacity.demand,
            levels=capacity.levels,
            start_spacing_seconds=capacity.spacing_seconds,
            starts_per_minute=capacity.by_spacing,
            places=capacity.places,
            run_seconds=capacity.run_seconds,
            ticks_per_minute_by_places=capacity.by_places,
            warning=capacity.warning(),
            says=capacity.words(),
        )


class Status(BaseModel):
    """The body of `/status`: the same snapshot `tickwork status` prints."""

    taken_at: datetime
    store_position: int
    projections: dict[str, Projection]
    levels: list[LevelStatus]
    running: list[InFlight]
    queued: list[InFlight]
    paused_levels: list[str]
    processes: list[Process]
    """Schedulers and workers, live ones and the last seen dead, newest beat first."""
    scheduler_running: bool
    """Whether a live scheduler fires the levels' slots (False: none will fire)."""
    backfills: list[BackfillView] = []
    """The newest backfills, open or ended, with their progress."""
    capacity: CapacityView | None = None

    @classmethod
    def of(cls, snapshot: Snapshot) -> Status:
        """The snapshot in the API's form, every duration measured at the snapshot's time."""
        now = snapshot.taken_at
        return cls(
            taken_at=now,
            store_position=snapshot.store_position,
            projections={
                name: Projection(position=snapshot.checkpoints[name], lag=lag)
                for name, lag in snapshot.projection_lag.items()
            },
            levels=snapshot.levels,
            running=[InFlight.of(tick, now) for tick in snapshot.running],
            queued=[InFlight.of(tick, now) for tick in snapshot.queued],
            paused_levels=snapshot.paused_levels,
            processes=[Process.of(beat, now) for beat in snapshot.processes],
            scheduler_running=any(beat.role == "scheduler" for beat in snapshot.live),
            backfills=[BackfillView.of(each) for each in snapshot.backfills],
            capacity=CapacityView.of(snapshot.capacity) if snapshot.capacity else None,
        )


class Tick(BaseModel):
    """A row of the ticks read model."""

    tick_id: str
    level: str
    status: str
    slot: Utc
    scheduled_at: Utc
    started_at: Utc
    finished_at: Utc
    prompt_tokens: int
    completion_tokens: int
    model_calls: int
    estimated_calls: int
    tool_calls: int
    tool_calls_cancelled: int
    result_path: str | None
    reason: str | None
    model: str | None = None
    """The model of its last spend, else the one it was scheduled for."""
    queue_wait_seconds: float | None = None
    """From its claim to its first start: how long it waited for a place (None until it
    started, and for a tick folded before this was kept, until a rebuild)."""
    attempts: int | None = None
    """The attempts it started (None until it started, and for a tick folded before this
    was kept, until a rebuild); `started_at` is the first one's start, so the time it took
    covers them all."""
    manual: bool | None = None
    """Started by hand (`tickwork tick`, the dashboard's buttons), not for a slot (None: a
    tick folded before this was kept, until a rebuild)."""


class Event(BaseModel):
    """A stored event as the API shows it (ids as strings, no metadata)."""

    global_position: int
    stream_position: int
    event_id: str
    type: str
    version: int
    data: dict[str, Any]
    recorded_at: datetime

    @classmethod
    def of(cls, event: StoredEvent) -> Event:
        """The API's form of a stored event."""
        return cls(
            global_position=event.global_position,
            stream_position=event.stream_position,
            event_id=str(event.event_id),
            type=event.type,
            version=event.version,
            data=event.data,
            recorded_at=event.recorded_at,
        )


class TickDetail(BaseModel):
    """One tick in full: its row, its events and its result file."""

    tick: Tick | None
    """None while the read model has not folded the tick yet."""
    events: list[Event]
    result: dict[str, Any] | None
    """The tick's result file, once it has one."""
    result_error: str | None
    """Why a result file the tick names could not be read."""
    targets: dict[str, dict[str, Any]] | None = None
    """The catalog targets its routing decision named (its candidates, then the promotions
    it moved to), as the catalog of the decision's revision defined them; None when the
    tick was not routed or that catalog was never stored."""
    archive: str | None = None
    """Where the tick's events are when they left the store: its day's archive data file
    (`tickwork show TICK --archive` reads it back); `events` is then empty."""
    transcript_archive: str | None = None
    """Where the transcript of a tick still hot went, when it left before the tick
    (`[retention] transcript_days`): its day's transcripts file; `events` hold no
    `TranscriptEntry` then."""


class Digest(BaseModel):
    """The latest `DigestPublished` of the configured digests, with the rendered file."""

    published_at: datetime
    data: dict[str, Any]
    """name, period_start, period_end, content_hash, format, targets, delivery, path."""
    content: str | None
    content_error: str | None
    """Why the file at `data.path` could not be read."""


class Started(BaseModel):
    """The answer to a run-now request: the tick's id, before it is recorded."""

    level: str
    tick_id: str
    page: str
    """The dashboard's page of the tick, which waits for it to be recorded."""


class Cancelled(BaseModel):
    """The answer to a cancel request: what it will reach, so the operator can check the scope."""

    scope: str
    scopes: list[str]
    """The scopes recorded: the level's, or one per tick in flight the prefix matched."""
    matching: list[str]
    """Tick ids in flight the request reaches, as the read model has them now."""


class Cleared(BaseModel):
    """What `DELETE /cancel/{scope}` answers: whether the scope was in force."""

    scope: str
    cleared: bool
    """False when the scope was not in force (nothing was recorded)."""


class Worker(BaseModel):
    """A `tickwork worker` of the procrastinate executor, as its heartbeat row has it."""

    worker_id: int
    host: str | None
    pid: int | None
    concurrency: int | None
    running: int
    """Tick jobs it runs now."""
    last_heartbeat: datetime


class Problem(BaseModel):
    """An error answer (401, 404): what was wrong, in words."""

    detail: str
