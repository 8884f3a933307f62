"""What happened in a period, for an operator who reads one page instead of event tables.

A digest is built from the ticks read model (how many ticks ended how, counted in the
database, and the latest few of each level to quote), the tick spend read model (what
the period's ticks spent per model, their governor interventions and hedges, summed in
the database), the level streams (pause reasons) and the result files of the quoted
ticks (an excerpt of each one's text): memory and time grow with levels and the
period's ticks, never with the events they recorded.
Anything wrong stands at the top as an anomaly: an empty text, a result file that is
missing or corrupt, a tick lost or timed out, spend that had to be estimated. A bad
result file never breaks a digest.

The JSON form of `Digest` is a versioned schema other tools may consume: fields are only
ever added within a `schema_version`.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from harness.contracts import (
    LevelPaused,
    ResultFileError,
    ResultMissingError,
    level_stream,
    read_result,
)
from harness.prices import PriceBook
from harness.projections import PeriodSpend, Projector, TickRow, paused_levels, period_of
from harness.scheduling import BudgetStatus
from harness.store import EventStore
from harness.timespec import as_utc

AnomalyKind = Literal[
    "empty_text", "missing_result", "corrupt_result", "lost", "timed_out", "estimated_spend"
]


PANEL_MEMBER = re.compile(r"-p(\d+|E)$")
"""A panel member's tick id: `<slot>-p1` … `-pN`, `-pE` for a replacement."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Anomaly(_Model):
    """Something wrong in the period, shown first so the operator need not hunt for it."""

    kind: AnomalyKind
    level: str
    tick_id: str
    detail: str


class Failure(_Model):
    """A failed tick and its reason."""

    tick_id: str
    reason: str


class Excerpt(_Model):
    """The start of a completed tick's text, so the digest shows what the agent said."""

    tick_id: str
    finished_at: datetime | None
    text: str
    """The start of the tick's text, whitespace collapsed, cut at the digest's length; a JSON
    level's parsed value, as compact JSON."""


class ModelSpend(_Model):
    """What one model cost a level in the period."""

    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    """None when the model has no known price."""


class LevelSection(_Model):
    """One level's period: its ticks by status, skips, spend, interventions and failures."""

    level: str
    ticks: dict[str, int]
    """Ticks scheduled in the period, by status (completed, failed, skipped …)."""
    skipped: dict[str, int]
    """Skipped slots by reason: overlap, budget, missed, paused."""
    spend: list[ModelSpend]
    tool_budget_exhausted: int
    governor_interventions: int
    hedges: int = 0
    """Stalled attempts that started a twin tick (`-h`) in the period."""
    hedge_tokens: int = 0
    hedge_cost_usd: float | None = 0.0
    """What the twins spent (None when one of their models has no known price)."""
    failures: list[Failure]
    paused: bool
    pause_reason: str | None
    excerpts: list[Excerpt]


class Digest(_Model):
    """What a period looked like, in the versioned form every format is rendered from."""

    schema_version: Literal[1] = 1
    name: str
    period_start: datetime
    period_end: datetime
    generated_at: datetime
    anomalies: list[Anomaly]
    levels: list[LevelSection]
    budgets: list[BudgetStatus] = []
    """Every configured budget as it stood when the digest was built."""

    @property
    def cost_usd(self) -> float | None:
        """The period's total cost; None when any model in it has no known price."""
        costs = [m.cost_usd for section in self.levels for m in section.spend]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)


SAMPLE = 20
"""Ticks per level and kind a digest quotes: the latest completed (their excerpts and the
anomalies their result files show), failed, and lost, timed out or estimated."""
QUOTED = 1000
"""Ticks of each kind a digest quotes at most, over all its levels: with many levels each
quotes fewer (at least one), so a digest stays one read. At 1,000 levels, 20 each was
20,000 result files read and a 3 MB page."""


def build_digest(
    store: EventStore,
    projector: Projector,
    prices: PriceBook,
    name: str,
    start: datetime,
    end: datetime,
    levels: list[str],
    excerpt_chars: int = 280,
    sample: int = SAMPLE,
) -> Digest:
    """The digest of the ticks of `levels` scheduled in [start, end), and what they spent.

    Ticks by status and skips by reason count every tick of the period, spend is all
    that the period's ticks spent (a tick scheduled just before the end counts its calls
    after it too), both summed in the database; failures, excerpts and anomalies are
    those of the latest `sample` ticks of each level and kind (fewer with many levels,
    `QUOTED`), and `tool_budget_exhausted` counts among the excerpted ticks, whose
    result files are the ones read. Memory goes with levels times the sample, not with
    the period's ticks: a daily digest at 1,000 levels a minute reads 1,000 result
    files, not 1.44 million.
    """
    if start >= end:
        raise ValueError(
            f"the period is empty: {start.isoformat()} is not before {end.isoformat()}"
        )
    sample = max(1, min(sample, QUOTED // max(1, len(levels))))
    projector.catch_up(["ticks", "tick_spend"])
    read = period_of(store, start, end, levels, sample)
    completed, failed = _by_level(read.completed), _by_level(read.failed)
    spend, governed, hedged = _period_sums(read.spend, prices)
    paused = paused_levels(store, levels)
    reasons = _pause_reasons(store, paused)
    noted: list[tuple[Any, str, int, Anomaly]] = []
    for row in read.anomalous:
        for anomaly in _row_anomalies(row):
            noted.append((row.scheduled_at, row.tick_id, len(noted), anomaly))
    ends: dict[str, Counter[str]] = defaultdict(Counter)
    skips: dict[str, Counter[str]] = defaultdict(Counter)
    for level, status, why, n in read.counts:
        ends[level][status] += n
        if status == "skipped":
            skips[level][why or "no reason"] += n
    sections = []
    for level in levels:
        excerpts, exhausted = [], 0
        for row in completed[level]:
            try:
                result = read_result(Path(row.result_path or ""))
            except ResultFileError as exc:
                kind: AnomalyKind = (
                    "missing_result" if isinstance(exc, ResultMissingError) else "corrupt_result"
                )
                anomaly = Anomaly(kind=kind, level=level, tick_id=row.tick_id, detail=str(exc))
                noted.append((row.scheduled_at, row.tick_id, len(noted), anomaly))
                continue
            text = " ".join(result.text.split())
            if result.value is not None:
                text = orjson.dumps(result.value).decode()
            if not text:
                anomaly = Anomaly(
                    kind="empty_text", level=level, tick_id=row.tick_id, detail="empty text"
                )
                noted.append((row.scheduled_at, row.tick_id, len(noted), anomaly))
            exhausted += result.stop_reason == "tool_budget"
            if PANEL_MEMBER.search(row.tick_id):
                continue  # the panel slot's own excerpt sets its members side by side
            excerpts.append(
                Excerpt(
                    tick_id=row.tick_id,
                    finished_at=as_utc(row.finished_at),
                    text=_cut(text, excerpt_chars),
                )
            )
        sections.append(
            LevelSection(
                level=level,
                ticks=dict(ends[level]),
                skipped=dict(skips[level]),
                spend=spend.get(level, []),
                tool_budget_exhausted=exhausted,
                governor_interventions=governed[level],
                hedges=hedged[level].calls,
                hedge_tokens=hedged[level].prompt_tokens + hedged[level].completion_tokens,
                hedge_cost_usd=hedged[level].cost_usd,
                failures=[
                    Failure(tick_id=row.tick_id, reason=row.reason or "no reason")
                    for row in failed[level]
                ],
                paused=level in paused,
                pause_reason=reasons.get(level),
                excerpts=excerpts,
            )
        )
    rank = {level: n for n, level in enumerate(levels)}
    noted.sort(key=lambda note: (rank[note[3].level], note[0], note[1], note[2]))
    return Digest(
        name=name,
        period_start=start,
        period_end=end,
        generated_at=datetime.now(UTC),
        anomalies=[note[3] for note in noted],
        levels=sections,
    )


def _by_level(rows: list[TickRow]) -> defaultdict[str, list[TickRow]]:
    """A sample's rows per level, in their order, for each level's section to take at once.

    Filtering the whole sample for each level cost levels times the sample: 27 s at 1,000.
    """
    found: defaultdict[str, list[TickRow]] = defaultdict(list)
    for row in rows:
        found[row.level].append(row)
    return found


def _row_anomalies(row: TickRow) -> list[Anomaly]:
    found = []
    if row.status in ("lost", "timed_out"):
        detail = row.reason or ("no end was recorded" if row.status == "lost" else "timed out")
        found.append(Anomaly(kind=row.status, level=row.level, tick_id=row.tick_id, detail=detail))
    if row.estimated_calls:
        detail = f"{row.estimated_calls} of {row.model_calls} call(s) reported no usage"
        found.append(
            Anomaly(kind="estimated_spend", level=row.level, tick_id=row.tick_id, detail=detail)
        )
    return found


def _period_sums(
    spent: PeriodSpend, prices: PriceBook
) -> tuple[dict[str, list[ModelSpend]], Counter[str], defaultdict[str, _Sum]]:
    """Spend per level and model, governor interventions and hedges per level, in the period.

    From the tick spend read model's sums over the period's ticks (`period_spend`), each
    row priced once (prices are linear within a tier). A hedge's `calls` count the twins
    started, its tokens and cost what they spent (a twin's spend is in the level's spend
    too).
    """
    sums: dict[tuple[str, str], _Sum] = {}
    governed: Counter[str] = Counter()
    hedged: defaultdict[str, _Sum] = defaultdict(_Sum)
    for row in spent.counters:
        governed[row.level] += int(row.governor_fired)
        hedged[row.level].calls += int(row.hedges)
    for rows, into in ((spent.spend, None), (spent.twins, hedged)):
        for row in rows:
            day = row.day.isoformat()
            tokens = [int(getattr(row, name)) for name in _TOKENS]
            cost = prices.cost(row.model, day, row.price_tier, *tokens)
            if into is None:
                total = sums.setdefault((row.level, row.model), _Sum())
                total.add(tokens[0], tokens[1], cost, calls=int(row.model_calls))
            else:
                into[row.level].add(tokens[0], tokens[1], cost, calls=0)
    return _spend_rows(sums), governed, hedged


_TOKENS = ("prompt_tokens", "completion_tokens", "cache_read_tokens", "cache_write_tokens")


@dataclass
class _Sum:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0

    def add(self, prompt: int, completion: int, cost: float | None, calls: int) -> None:
        self.calls += calls
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.cost_usd = None if cost is None or self.cost_usd is None else self.cost_usd + cost


def _spend_rows(sums: dict[tuple[str, str], _Sum]) -> dict[str, list[ModelSpend]]:
    rows: dict[str, list[ModelSpend]] = {}
    for (level, model), total in sorted(sums.items()):
        rows.setdefault(level, []).append(ModelSpend(model=model, **asdict(total)))
    return rows


def _pause_reasons(store: EventStore, paused: set[str]) -> dict[str, str]:
    streams = {level_stream(level): level for level in paused}
    found = store.read_streams(streams, types=[LevelPaused.type])
    return {
        streams[stream]: _with_note(events[-1].data.get("reason", ""), events[-1].data.get("note"))
        for stream, events in found.items()
        if events
    }


def _with_note(reason: str, note: str | None) -> str:
    """A pause's reason, with the note an operator left (`tickwork pause --note`)."""
    return f"{reason} (note: {note})" if note else reason


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"
