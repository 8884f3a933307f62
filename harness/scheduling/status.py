"""A snapshot of the service for operators: levels, ticks in flight, today's spend.

Built from the configuration and the store alone (any process can show it, not only the
one running the scheduler); the CLI prints it, the HTTP API serves it and `/metrics`
exports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from harness.config import Settings
from harness.contracts import CancelRequested
from harness.prices import PriceBook, format_usd
from harness.projections import (
    TickInFlight,
    cancel_scopes,
    paused_levels,
    projector_for,
    spend_by,
    ticks_in_flight,
)
from harness.scheduling.backfill import BackfillProgress, recent_progress
from harness.scheduling.capacity import Capacity, read_capacity
from harness.scheduling.triggers import level_trigger, upcoming_slot
from harness.store import Beat, EventStore, beats


@dataclass(frozen=True)
class LevelStatus:
    """One level's line of `tickwork status`: schedule, next slot, pause and today's spend."""

    name: str
    schedule: str
    next_slot: datetime | None
    """None once the schedule has ended (past its `end_at`), or while the level is refused."""
    paused: bool
    tokens_today: int
    cost_today_usd: float | None
    token_budget: int | None
    usd_budget: float | None
    refused: str | None = None
    """Why the level cannot run on this host and how to fix it (`Settings.refusal`): it
    fires no slot until then."""

    def against_budget(self) -> tuple[str, str]:
        """Tokens and USD spent today, each against its budget if it has one, for people."""
        tokens = f"{self.tokens_today:,}"
        if self.token_budget is not None:
            tokens += f" / {self.token_budget:,}"
        cost = format_usd(self.cost_today_usd)
        if self.usd_budget is not None:
            cost += f" / {self.usd_budget:,.2f}"
        return tokens, cost


def level_statuses(settings: Settings, store: EventStore, prices: PriceBook) -> list[LevelStatus]:
    """Every configured level's status, from one read of the spend read model."""
    now = datetime.now(UTC)
    spend = {row.group["level"]: row for row in spend_by(store, prices, ["level"], {}, now.date())}
    paused = paused_levels(store, settings.levels)
    refused = settings.refused_levels()
    statuses = []
    for name, config in settings.levels.items():
        today = spend.get(name)
        statuses.append(
            LevelStatus(
                name=name,
                schedule=config.schedule_text,
                next_slot=None if name in refused else upcoming_slot(level_trigger(config), now),
                paused=name in paused,
                tokens_today=(today.prompt_tokens + today.completion_tokens) if today else 0,
                cost_today_usd=today.cost_usd if today else 0.0,
                token_budget=config.daily_token_budget,
                usd_budget=config.daily_usd_budget,
                refused=refused.get(name),
            )
        )
    return statuses


@dataclass(frozen=True)
class Snapshot:
    """Everything `tickwork status` shows, read at one moment."""

    taken_at: datetime
    store_position: int
    """The last global position stored."""
    checkpoints: dict[str, int]
    """Projection name -> the position it has folded up to."""
    projection_lag: dict[str, int]
    """Projection name -> events stored but not yet folded (counted: positions need not be
    dense, PostgreSQL's jump between transactions)."""
    levels: list[LevelStatus]
    in_flight: list[TickInFlight]
    cancel_scopes: list[CancelRequested]
    """In force until cleared: ticks they cover end cancelled before they start."""
    processes: list[Beat]
    """Schedulers and workers by their heartbeats, newest beat first: live and last seen."""
    backfills: list[BackfillProgress] = field(default_factory=list)
    """The newest backfills (`tickwork backfill`), open or ended, with their progress."""
    capacity: Capacity | None = None
    """The levels' demand in slots a minute beside what the executor can start."""

    @property
    def live(self) -> list[Beat]:
        """The processes that beat recently: a scheduler among them fires the slots."""
        return [beat for beat in self.processes if beat.live(self.taken_at)]

    def liveness(self) -> list[str]:
        """Each live process as a line, or plainly that no scheduler runs, for people."""
        lines = [
            f"{beat.role} pid {beat.pid} on {beat.host}, since {beat.started_at:%Y-%m-%d %H:%M:%S}"
            f" UTC, last beat {(self.taken_at - beat.beat_at).total_seconds():.0f} s ago"
            for beat in self.live
        ]
        if not any(beat.role == "scheduler" for beat in self.live):
            dead = next((b for b in self.processes if b.role == "scheduler"), None)
            seen = (
                f" (last: pid {dead.pid} on {dead.host}, "
                f"last beat {dead.beat_at:%Y-%m-%d %H:%M:%S} UTC)"
                if dead
                else ""
            )
            lines.insert(0, f"no scheduler running: no slot fires until `tickwork run`{seen}")
        return lines

    @property
    def running(self) -> list[TickInFlight]:
        """Ticks that hold a place and run now."""
        return [tick for tick in self.in_flight if tick.status == "running"]

    @property
    def queued(self) -> list[TickInFlight]:
        """Ticks claimed and waiting for a place (or held back behind their level's tick)."""
        return [tick for tick in self.in_flight if tick.status == "scheduled"]

    @property
    def paused_levels(self) -> list[str]:
        """Names of the levels that start no tick until resumed."""
        return [level.name for level in self.levels if level.paused]


def projection_lag(
    store: EventStore, prices: PriceBook
) -> tuple[int, dict[str, int], dict[str, int]]:
    """The store's last position, each projection's checkpoint, and its lag in events.

    Checkpoints are read before the store's position, so a fold in between can only
    overstate the lag, never make it negative. A projection behind has its lag counted.
    """
    checkpoints = projector_for(store, prices).checkpoints()
    position = store.last_position()
    lag = {
        name: store.window(at, position).events if at < position else 0
        for name, at in checkpoints.items()
    }
    return position, checkpoints, lag


def snapshot(settings: Settings, store: EventStore, prices: PriceBook) -> Snapshot:
    """The status of the service, from read models the caller has brought up to date."""
    position, checkpoints, lag = projection_lag(store, prices)
    levels = level_statuses(settings, store, prices)
    return Snapshot(
        taken_at=datetime.now(UTC),
        store_position=position,
        checkpoints=checkpoints,
        projection_lag=lag,
        levels=levels,
        in_flight=ticks_in_flight(store),
        cancel_scopes=cancel_scopes(store),
        processes=beats(store),
        backfills=recent_progress(settings, store),
        capacity=read_capacity(settings, store, [level.name for level in levels if level.paused]),
    )


def refresh(settings: Settings, store: EventStore) -> PriceBook:
    """Bring the read models up to date; returns the price book they are priced with."""
    prices = PriceBook(settings.prices)
    projector_for(store, prices).catch_up()
    return prices
