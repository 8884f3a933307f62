"""What the API and the dashboard read: the status snapshot, ticks, spend and digests.

One `Reads` per server holds the store, the price book and the projector; each request
brings the read models up to date once (`fresh`) and then reads from them, so an answer
is never older than the request, whichever process runs the scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

from harness.api.models import Digest, Event, Tick, TickDetail, Worker
from harness.config import Settings
from harness.contracts import (
    LevelPaused,
    ResultFileError,
    RoutePromoted,
    TickScheduled,
    read_result,
)
from harness.projections import (
    OPEN,
    LevelStats,
    ReportGroup,
    SpendRow,
    TickCursor,
    TickMark,
    last_statuses,
    latest_published,
    latest_ticks,
    pauses,
    projector_for,
    spend_by,
    stats_of_levels,
    tick_page,
    top_spenders,
)
from harness.routing import RevisionError, price_book, recorded_catalog
from harness.scheduling import Budgets, BudgetStatus, Snapshot, budget_statuses, snapshot
from harness.store import (
    EVENTS_FILE,
    TRANSCRIPTS_FILE,
    EventStore,
    StoredEvent,
    day_folder,
    find_archived,
)
from harness.store import archived_on as transcript_archived_on


class Reads:
    """The read side of one server: store, prices and projector, shared by its requests."""

    def __init__(self, settings: Settings, store: EventStore) -> None:
        self.settings = settings
        self.store = store
        self.prices = price_book(settings)
        self.projector = projector_for(store, self.prices)
        self._budgets: Budgets | None = None

    def fresh(self) -> Reads:
        """Fold what is new into the read models, so the answer is not older than the request.

        Every append committed before the request first becomes readable: on PostgreSQL
        one still writing below it (another tick's, milliseconds) holds the readers'
        horizon back, and a catch-up then would stop short of an append the client saw
        succeed.
        """
        self.store.wait_settled(self.store.newest_position())
        self.projector.catch_up()
        return self

    def snapshot(self) -> Snapshot:
        """The status snapshot, as `tickwork status` builds it."""
        return snapshot(self.settings, self.store, self.prices)

    def workers(self) -> list[Worker]:
        """The procrastinate executor's workers; none with the local executor."""
        if self.settings.executor.kind != "procrastinate":
            return []
        from harness.execution import workers

        return [Worker(**vars(worker)) for worker in workers(self.store)]

    def ticks(
        self,
        *,
        levels: Sequence[str] | None = None,
        status: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[Tick]:
        """Ticks from the read model, newest first, filtered as the API's query asks."""
        return self.tick_page(levels=levels, status=status, since=since, limit=limit)[0]

    def tick_page(
        self,
        *,
        levels: Sequence[str] | None = None,
        status: str | None = None,
        since: datetime | None = None,
        before: TickCursor | None = None,
        limit: int = 100,
    ) -> tuple[list[Tick], TickCursor | None]:
        """A page of `ticks` after a cursor, and the next page's cursor (None: no more)."""
        page = tick_page(
            self.store, levels=levels, status=status, since=since, before=before, limit=limit
        )
        return [Tick.model_validate(row, from_attributes=True) for row in page.rows], page.following

    def last_statuses(self) -> dict[str, str]:
        """Each configured level's newest tick's status (absent: the level has no tick yet)."""
        return last_statuses(self.store, self.settings.levels)

    def recent_ticks(self, levels: Sequence[str], n: int) -> dict[str, list[TickMark]]:
        """The newest `n` ticks of each of `levels`, newest first, as a timeline draws them."""
        return latest_ticks(self.store, levels, n)

    def saying(self, ticks: list[Tick], text: str) -> list[Tick]:
        """The ticks whose id, model, reason or result text holds `text` (case ignored).

        A search of the page the filters chose (at most 1,000 ticks, one result file each),
        never of the whole history: a full-text index of every result is not kept.
        """
        wanted = text.casefold()

        def says(tick: Tick) -> bool:
            known = " ".join(filter(None, (tick.tick_id, tick.model, tick.reason)))
            if wanted in known.casefold():
                return True
            if tick.result_path is None or tick.status != "completed":
                return False
            try:
                return wanted in (read_result(Path(tick.result_path)).text or "").casefold()
            except ResultFileError:
                return False

        return [tick for tick in ticks if says(tick)]

    def tick(self, tick_id: str) -> TickDetail | None:
        """A tick's events, read model row and result file; None when no such tick exists."""
        events = self.store.read_stream(f"tick-{tick_id}")
        rows = tick_page(self.store, tick_id=tick_id, limit=1).rows
        tick = Tick.model_validate(rows[0], from_attributes=True) if rows else None
        if not events:
            found = find_archived(self.store, self.settings.retention.archive, tick_id)
            if found is None:
                return None
            archive = day_folder(self.settings.retention.archive, found[0]) / EVENTS_FILE
            return TickDetail(
                tick=tick, events=[], result=None, result_error=None, archive=str(archive)
            )
        result, error = None, None
        # A tick in flight has written no result yet: its file is not missing.
        if tick is not None and tick.result_path and tick.status not in OPEN:
            try:
                result = read_result(Path(tick.result_path)).model_dump(mode="json")
            except ResultFileError as exc:
                error = str(exc)
        said = transcript_archived_on(self.store, tick_id)
        return TickDetail(
            tick=tick,
            events=[Event.of(e) for e in events],
            result=result,
            result_error=error,
            targets=self._decided_targets(events),
            transcript_archive=None
            if said is None
            else str(day_folder(self.settings.retention.archive, said) / TRANSCRIPTS_FILE),
        )

    def level_stats(self, now: datetime) -> list[LevelStats]:
        """Each configured level's last outcome, success rate, streak and run times."""
        return stats_of_levels(self.store, self.settings.levels, now)

    def pauses(self) -> dict[str, LevelPaused]:
        """The pause in force of each paused level: who decided it, why and when."""
        return pauses(self.store, self.settings.levels)

    def _decided_targets(self, events: Sequence[StoredEvent]) -> dict[str, dict[str, Any]] | None:
        """The targets a tick's decision named, from the stored catalog of its revision."""
        scheduled = next((e.data for e in events if e.type == TickScheduled.type), {})
        revision = scheduled.get("catalog_revision")
        if not revision:
            return None
        try:
            catalog = recorded_catalog(self.store, revision).catalog
        except RevisionError:
            return None
        named = list(scheduled.get("candidates") or [])
        named += [e.data["to_target"] for e in events if e.type == RoutePromoted.type]
        targets = catalog.get("targets", {})
        return {name: targets[name] for name in dict.fromkeys(named) if name in targets}

    def spend(
        self,
        by: Sequence[ReportGroup],
        since: date | None = None,
        levels: Sequence[str] | None = None,
    ) -> list[SpendRow]:
        """Spend grouped as asked (`tag` too), from the spend read model; of `levels` only."""
        tags = {name: list(level.tags) for name, level in self.settings.levels.items()}
        return spend_by(self.store, self.prices, by, tags, since=since, levels=levels)

    def top_spenders(self, since: date, n: int) -> list[str]:
        """The `n` levels that spent the most tokens from `since` on, most first."""
        return top_spenders(self.store, since, n)

    def budget_model(self) -> Budgets:
        """The budgets of the configuration over this server's read models, made once."""
        if self._budgets is None:
            self._budgets = Budgets(self.store, self.projector, self.prices, self.settings)
        return self._budgets

    def budgets(self) -> list[BudgetStatus]:
        """Every budget's current window (`harness.scheduling.budget_watch`)."""
        return budget_statuses(self.budget_model())

    def latest_digest(self) -> Digest | None:
        """The last digest published by any configured digest, and its rendered file."""
        last = latest_published(self.store, self.settings.digests)
        if last is None:
            return None
        content, error = None, None
        path = last.data.get("path")
        if not path:
            error = "the event names no file"
        else:
            try:
                content = Path(path).read_text(encoding="utf-8")
            except OSError as exc:
                error = f"{path}: {exc.strerror or exc}"
            except UnicodeDecodeError:
                error = f"{path}: not UTF-8 text"
        return Digest(
            published_at=last.recorded_at, data=last.data, content=content, content_error=error
        )
