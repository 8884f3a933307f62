"""The dashboard's panels, rendered on the server as one HTML fragment.

The page (`static/dashboard.html`) is an empty shell whose script fetches this fragment
every few seconds: no template engine, no chart library, no CDN; the spend chart is SVG
drawn here, so the page works offline and shows the same numbers as `/spend`.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from html import escape
from typing import Literal
from urllib.parse import quote

from harness.api.budget_panel import budget_panel
from harness.api.html_parts import section as _section
from harness.api.html_parts import table as _table
from harness.api.models import Digest, Tick
from harness.api.reads import Reads
from harness.api.upstream_cells import fake_notice, level_upstreams, scheduler_of
from harness.config import Settings
from harness.contracts import LevelPaused
from harness.prices import PriceBook, format_usd, tick_cost
from harness.projections import DURATION_BUCKETS, STATUSES, UNKNOWN, LevelStats, SpendRow, TickMark
from harness.scheduling import Snapshot

TIMELINE_TICKS = 40
"""Recent ticks per level on the timeline."""
TIMELINE_LANES = 30
"""Levels on the timeline: at 1,000 levels, 40,000 marks took seconds to read and draw
every refresh, and no one reads 1,000 lanes. Those whose newest tick did not go well
come first, then paused ones, then the rest in configured order."""
HEALTHY = ("completed", "running", "scheduled")
"""A level whose newest tick has one of these statuses needs no look first."""
CHART_DAYS = 14
CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 720, 220, 40
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7")
CHART_LEVELS = len(PALETTE)
"""Levels the spend chart draws apart, a colour each: the most spending; the rest are one."""
OTHERS = "other levels"
OTHERS_COLOUR = "#bab0ac"


ChartUnit = Literal["tokens", "usd"]


def panels(reads: Reads, chart: ChartUnit = "tokens") -> str:
    """The dashboard's panels as one HTML fragment, so a refresh replaces them in one swap."""
    status = reads.snapshot()
    levels = list(reads.settings.levels)
    lanes = _lanes(levels, reads.last_statuses(), set(status.paused_levels))
    since = status.taken_at.date() - timedelta(days=CHART_DAYS - 1)
    other = "usd" if chart == "tokens" else "tokens"
    switch = (
        f'<p class="meta"><button type="button" data-chart="{other}">'
        f"Show {'USD' if other == 'usd' else 'tokens'}</button></p>"
    )
    return "\n".join(
        (
            _liveness(status),
            _overview(status, reads.settings),
            _health(reads.level_stats(status.taken_at), status),
            _in_flight(status),
            _workers(reads, status.taken_at),
            _paused(reads.pauses()),
            budget_panel(reads.budgets()),
            _backfills(status),
            _timeline(len(levels), reads.recent_ticks(lanes, TIMELINE_TICKS), status.taken_at),
            _section(
                f"Spend per day ({'USD' if chart == 'usd' else 'tokens'})",
                switch + _spend_chart(reads, since, status.taken_at, chart),
                "spend",
            ),
            _digest(reads.latest_digest()),
        )
    )


BY_HAND = ' <span class="by-hand">by hand</span>'
"""A tick started by hand, marked in the list as the service log marks it."""


def tick_href(tick_id: str) -> str:
    """The dashboard's page of a tick."""
    return f"/ui/ticks/{quote(tick_id, safe='')}"


def _tick_link(tick_id: str) -> str:
    return f'<a href="{escape(tick_href(tick_id))}">{escape(tick_id)}</a>'


def tick_table(ticks: list[Tick], prices: PriceBook) -> str:
    """Ticks as a table whose ids link to their pages (the tick list's fragment)."""
    if not ticks:
        return '<p class="empty">no tick matches</p>'
    rows = [
        f'<tr class="s-row-{escape(tick.status)}"><td>{_tick_link(tick.tick_id)}</td>'
        f"<td>{escape(tick.level)}</td>"
        f'<td><span class="mark s-{escape(tick.status)}"></span> {escape(tick.status)}'
        f"{BY_HAND if tick.manual else ''}</td>"
        f"<td>{_time(tick.scheduled_at)}</td><td>{_took(tick)}</td>"
        f"<td>{tick.attempts or ''}</td>"
        f"<td>{escape(tick.model or '')}</td>"
        f"<td>{tick.prompt_tokens + tick.completion_tokens:,}</td>"
        f"<td>{_tick_usd(tick, prices)}</td>"
        f"<td>{escape(tick.reason or '')}</td></tr>"
        for tick in ticks
    ]
    return _table(
        (
            "tick",
            "level",
            "status",
            "scheduled (UTC)",
            "took",
            "attempts",
            "model",
            "tokens",
            "USD",
            "reason",
        ),
        rows,
    )


def _took(tick: Tick) -> str:
    if tick.started_at is None or tick.finished_at is None:
        return ""
    return f"{(tick.finished_at - tick.started_at).total_seconds():.1f} s"


def _tick_usd(tick: Tick, prices: PriceBook) -> str:
    if not tick.model_calls:
        return ""
    day = f"{_when(tick) or tick.finished_at or datetime.now(UTC):%Y-%m-%d}"
    cost = tick_cost(
        prices, tick.model, day, tick.prompt_tokens, tick.completion_tokens, tick.model_calls
    )
    return format_usd(cost)


def _time(value: datetime | None) -> str:
    return "" if value is None else f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def _iso_time(value: object) -> str:
    """A time an event holds as ISO text, shown as every time here; as it is if it is not one."""
    try:
        return _time(datetime.fromisoformat(str(value)))
    except ValueError:
        return escape(str(value))


def _liveness(status: Snapshot) -> str:
    """Each live scheduler and worker, or plainly that none runs: the page's first question."""
    live = status.live
    rows = [
        f'<tr class="live r-{escape(beat.role)}"><td>{escape(beat.role)}</td>'
        f"<td>{escape(beat.host)}</td><td>{beat.pid}</td><td>{_time(beat.started_at)}</td>"
        f"<td>{(status.taken_at - beat.beat_at).total_seconds():.0f} s ago</td></tr>"
        for beat in live
    ]
    table = _table(("process", "host", "pid", "since (UTC)", "last beat"), rows) if rows else ""
    if any(beat.role == "scheduler" for beat in live):
        return _section("Running", table, "liveness")
    warning = status.liveness()[0]
    return _section("Running", f'<p class="none error">{escape(warning)}</p>{table}', "liveness")


def _overview(status: Snapshot, settings: Settings) -> str:
    """Each level: schedule, state, spend against budget, where its calls go; its buttons."""
    lag = ", ".join(f"{name} {behind}" for name, behind in status.projection_lag.items())
    scheduler = scheduler_of(status.live)
    firing = scheduler is not None
    upstreams = level_upstreams(settings, scheduler)
    rows = []
    for level in status.levels:
        state = "paused" if level.paused else "active" if firing else "not firing: no scheduler"
        if level.refused:
            state = f"refused: {level.refused}"
        cells = (
            level.name,
            level.schedule,
            _time(level.next_slot),
            state,
            *level.against_budget(),
            upstreams.get(level.name, ""),
        )
        name = escape(level.name)
        switch = (
            f'<button type="button" data-resume="{name}">Resume</button>'
            if level.paused
            else f'<button type="button" data-pause="{name}">Pause</button>'
        )
        buttons = (
            f'<td class="actions"><button type="button" data-run="{name}">Run now</button> '
            f"{switch}</td>"
        )
        rows.append(
            "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + buttons + "</tr>"
        )
    return _section(
        "Levels",
        f'<p class="meta">store at {status.store_position}, projection lag: {escape(lag)}; '
        f"updated {_time(status.taken_at)} UTC</p>"
        + fake_notice(scheduler)
        + _capacity(status)
        + _table(
            (
                "level",
                "schedule",
                "next slot (UTC)",
                "state",
                "tokens today / budget",
                "USD today / budget",
                "upstream",
                "",
            ),
            rows,
        ),
        "levels",
    )


def _capacity(status: Snapshot) -> str:
    """The levels' demand beside what the start spacing and the places allow, and a warning."""
    capacity = status.capacity
    if capacity is None or not capacity.levels:
        return ""
    warning = capacity.warning()
    said = f'<p id="capacity" class="meta">capacity: {escape(capacity.words())}</p>'
    return said + (f'<p id="over-capacity" class="error">{escape(warning)}</p>' if warning else "")


def _seconds(value: float | None, any_ended: bool) -> str:
    if value is None:
        return f"> {DURATION_BUCKETS[-1]:g} s" if any_ended else ""
    return f"≤ {value:g} s"


def _health(stats: list[LevelStats], status: Snapshot) -> str:
    """Per level: last outcome, success rate, failure streak, run times, cost per tick.

    The success rate and the cost per tick are over the same ticks (`LevelStats.ran_today`),
    the cost per tick being today's spend of the level over them.
    """
    cost_today = {level.name: level.cost_today_usd for level in status.levels}
    rows = []
    for each in stats:
        last = (
            f'<span class="mark s-{escape(each.last_status)}"></span> '
            f"{_tick_link(each.last_tick_id)} {escape(each.last_status)}"
            if each.last_tick_id and each.last_status
            else '<span class="empty">none yet</span>'
        )
        rate, ran = each.success_rate, each.ran_today
        success = "" if rate is None else f"{rate:.0%} of {ran}"
        streak = (
            f'<span class="error">{each.failure_streak} failed in a row</span>'
            if each.failure_streak
            else "0"
        )
        cost = cost_today.get(each.level)
        per_tick = (
            f"${format_usd(cost / ran)}"
            if ran and cost is not None
            else ("unpriced" if ran else "")
        )
        any_ended = each.p50_seconds is not None or each.last_status is not None
        rows.append(
            f'<tr data-level="{escape(each.level)}"><td>{escape(each.level)}</td>'
            f'<td class="last">{last}</td><td class="success">{success}</td>'
            f'<td class="streak">{streak}</td>'
            f"<td>{_seconds(each.p50_seconds, any_ended)}</td>"
            f"<td>{_seconds(each.p95_seconds, any_ended)}</td>"
            f'<td class="per-tick">{per_tick}</td></tr>'
        )
    headers = (
        "level",
        "last outcome",
        "success today",
        "failure streak",
        "p50 run time",
        "p95 run time",
        "USD per tick today",
    )
    return _section("Level health", _table(headers, rows), "health")


def _in_flight(status: Snapshot) -> str:
    if not status.in_flight:
        return _section("Ticks in flight", '<p class="empty">no tick in flight</p>', "running")
    rows = []
    for tick in status.in_flight:
        if tick.started_at is None:
            state, time = "queued", f"waiting {tick.waited(status.taken_at) or 0:.0f} s"
        else:
            state = "running"
            time = (
                f'<span class="runtime" data-since="{tick.started_at.isoformat()}">'
                f"{tick.runtime(status.taken_at) or 0:.0f} s</span>"
            )
        rows.append(
            f'<tr class="{state}" data-tick="{escape(tick.tick_id)}">'
            f"<td>{_tick_link(tick.tick_id)}</td><td>{escape(tick.level)}</td>"
            f"<td>{state}</td><td>{time}</td></tr>"
        )
    return _section(
        "Ticks in flight",
        _table(("tick", "level", "state", "runtime"), rows),
        "running",
    )


def _workers(reads: Reads, now: datetime) -> str:
    """The procrastinate executor's workers; nothing with the local executor."""
    if reads.settings.executor.kind != "procrastinate":
        return ""
    workers = reads.workers()
    if not workers:
        return _section("Workers", '<p class="empty">no worker registered</p>', "workers")
    rows = [
        f"<tr><td>{worker.worker_id}</td><td>{escape(worker.host or '?')}</td>"
        f"<td>{worker.concurrency or '?'}</td><td>{worker.running}</td>"
        f"<td>{(now - worker.last_heartbeat).total_seconds():.0f} s ago</td></tr>"
        for worker in workers
    ]
    headers = ("worker", "host", "concurrency", "running", "last heartbeat")
    return _section("Workers", _table(headers, rows), "workers")


def _paused(paused: dict[str, LevelPaused]) -> str:
    if not paused:
        return _section("Paused levels", '<p class="empty">none</p>', "paused")
    items = "".join(
        f'<li class="{"auto" if pause.by == "tickwork" else "operator"}">'
        f'<span class="level">{escape(name)}</span> '
        f'<span class="why">since {_time(pause.occurred_at)} UTC, by {escape(pause.by)}: '
        f"{escape(pause.reason)}"
        f"{escape(f' (note: {pause.note})') if pause.note else ''}</span> "
        f'<button type="button" data-resume="{escape(name)}">Resume</button></li>'
        for name, pause in sorted(paused.items())
    )
    return _section("Paused levels", f"<ul>{items}</ul>", "paused")


def _backfills(status: Snapshot) -> str:
    """The newest backfills with their progress; nothing at all when there are none."""
    if not status.backfills:
        return ""
    rows = []
    for shown in status.backfills:
        request, progress = shown.backfill.request, shown.progress
        ended = ", ".join(f"{n} {what}" for what, n in sorted(progress.statuses.items()))
        rows.append(
            f"<tr><td>{escape(request.backfill_id)}</td><td>{escape(request.level)}</td>"
            f"<td>{_time(request.start)} to {_time(request.end)}</td>"
            f"<td>{escape(shown.backfill.state)}</td>"
            f"<td>{progress.claimed}/{progress.slots}</td><td>{progress.in_flight}</td>"
            f"<td>{escape(ended)}</td></tr>"
        )
    headers = ("backfill", "level", "range (UTC)", "state", "claimed", "in flight", "ended")
    return _section("Backfills", _table(headers, rows), "backfills")


def _when(tick: Tick) -> datetime | None:
    return tick.scheduled_at or tick.started_at or tick.finished_at


def _lanes(levels: list[str], last: dict[str, str], paused: set[str]) -> list[str]:
    """The levels the timeline shows (`TIMELINE_LANES`), those that need a look first."""
    troubled = [level for level in levels if last.get(level, "completed") not in HEALTHY]
    held = [level for level in levels if level in paused]
    return list(dict.fromkeys([*troubled, *held, *levels]))[:TIMELINE_LANES]


def _timeline(configured: int, recent: dict[str, list[TickMark]], now: datetime) -> str:
    """Each shown level's recent ticks placed on one time axis, from the oldest shown to now."""
    times = [tick.at for marks in recent.values() for tick in marks]
    start = min(times, default=now - timedelta(hours=1))
    span = max((now - start).total_seconds(), 1.0)

    def left(when: datetime) -> str:
        share = (when - start).total_seconds() / span
        return f"{min(max(share, 0.0), 1.0) * 100:.2f}%"

    rows = []
    for level, marks in recent.items():
        drawn = "".join(
            f'<a class="mark s-{escape(tick.status)}" style="left:{left(tick.at)}" '
            f'href="{escape(tick_href(tick.tick_id))}" title="{escape(tick.tick_id)} '
            f"{_time(tick.at)} UTC: {escape(tick.status)}"
            f'{escape(": " + tick.reason) if tick.reason else ""}"></a>'
            for tick in reversed(marks)
        )
        rows.append(
            f'<div class="lane"><span class="level">{escape(level)}</span>'
            f'<span class="track">{drawn}</span></div>'
        )
    steps = [start + (now - start) * k / 4 for k in range(5)]
    labels = "".join(
        f'<span class="tick-label" style="left:{k * 25}%">{when:%H:%M:%S}</span>'
        for k, when in enumerate(steps)
    )
    rows.append(
        '<div class="lane axis"><span class="level">UTC</span>'
        f'<span class="track">{labels}</span></div>'
    )
    legend = "".join(
        f'<span class="key"><span class="mark s-{s}"></span>{s.replace("_", " ")}</span>'
        for s in STATUSES
        if s != UNKNOWN
    )
    more = ""
    if configured > len(recent):
        more = (
            f'<p class="meta">{len(recent)} of {configured:,} levels, those whose last tick '
            "did not go well first, then paused ones; every tick is in the "
            '<a href="/ui/ticks">tick list</a></p>'
        )
    return _section(
        f"Recent ticks (last {TIMELINE_TICKS} per level, on one time axis to now)",
        f'{more}{"".join(rows)}<p class="legend">{legend}</p>',
        "timeline",
    )


def _spend_chart(reads: Reads, since: date, now: datetime, unit: ChartUnit) -> str:
    """The chart of the CHART_LEVELS levels that spent the most tokens, and the others as one.

    Each of those levels' rows per day, and one row per day of all levels: a chart of
    1,000 levels drew (and priced) 14,000 bars every refresh, which no one can read.
    """
    shown = reads.top_spenders(since, CHART_LEVELS)
    rows = reads.spend(("day", "level"), since, levels=shown) if shown else []
    return spend_chart(rows, reads.spend(("day",), since), now, shown, unit)


def spend_chart(
    rows: list[SpendRow],
    days_total: list[SpendRow],
    now: datetime,
    levels: list[str],
    unit: ChartUnit = "tokens",
) -> str:
    """Stacked bars of tokens (or USD) per UTC day, one colour per level, for CHART_DAYS.

    `rows` are per day and level (of `levels`), `days_total` per day of every level: what
    they leave is drawn as OTHERS. In USD an unpriced model's spend counts nothing; the
    legend says how many calls that is.
    """
    days = [(now.date() - timedelta(days=back)).isoformat() for back in reversed(range(CHART_DAYS))]
    tokens: dict[str, dict[str, float]] = defaultdict(dict)

    def charted(row: SpendRow) -> float:
        return (
            row.prompt_tokens + row.completion_tokens if unit == "tokens" else row.cost_usd or 0.0
        )

    for row in rows:
        tokens[row.group["day"]][row.group["level"]] = charted(row)
    unpriced = 0
    for total in days_total:
        left = charted(total) - sum(tokens[total.group["day"]].values())
        # A float's rounding (USD) leaves crumbs that are no one's spend.
        if left > (0 if unit == "tokens" else 1e-9):
            tokens[total.group["day"]][OTHERS] = left
        unpriced += total.unpriced_calls

    def amount(value: float) -> str:
        return f"{value:,.0f} tokens" if unit == "tokens" else f"${format_usd(value)}"

    drawn = {level for day in tokens.values() for level in day}
    names = [*levels, *sorted(drawn - {*levels, OTHERS}), *([OTHERS] if OTHERS in drawn else [])]
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    colour[OTHERS] = OTHERS_COLOUR
    top = max((sum(day.values()) for day in tokens.values()), default=0) or 1
    plot_height = CHART_HEIGHT - 2 * CHART_PAD
    step = (CHART_WIDTH - 2 * CHART_PAD) / CHART_DAYS
    parts = [
        '<svg class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" '
        f'aria-label="{unit} per day per level">',
        f'<text x="{CHART_PAD}" y="{CHART_PAD - 12}">max {amount(top)}/day</text>',
        f'<line x1="{CHART_PAD}" y1="{CHART_HEIGHT - CHART_PAD}" x2="{CHART_WIDTH - CHART_PAD}" '
        f'y2="{CHART_HEIGHT - CHART_PAD}" stroke="#888"/>',
    ]
    for index, day in enumerate(days):
        x = CHART_PAD + index * step
        base = float(CHART_HEIGHT - CHART_PAD)
        for name in names:
            value = tokens[day].get(name, 0)
            if not value:
                continue
            height = max(1.0, value / top * plot_height)
            base -= height
            parts.append(
                f'<rect class="bar" data-level="{escape(name)}" x="{x + 2:.1f}" y="{base:.1f}" '
                f'width="{step - 4:.1f}" height="{height:.1f}" fill="{colour[name]}">'
                f"<title>{escape(name)} {day}: {amount(value)}</title></rect>"
            )
        if (len(days) - 1 - index) % 2 == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{CHART_HEIGHT - CHART_PAD + 16}" '
                f'text-anchor="middle">{day[5:]}</text>'
            )
    parts.append("</svg>")
    legend = "".join(
        f'<span class="key"><span class="swatch" style="background:{colour[name]}"></span>'
        f"{escape(name)}</span>"
        for name in names
    )
    if unit == "usd" and unpriced:
        legend += f'<span class="key">{unpriced:,} call(s) of unpriced models not counted</span>'
    return "".join(parts) + f'<p class="legend">{legend}</p>'


def _digest(digest: Digest | None) -> str:
    if digest is None:
        return _section("Latest digest", '<p class="empty">no digest published yet</p>', "digest")
    name = escape(str(digest.data.get("name", "?")))
    start, end = (_iso_time(digest.data.get(key)) for key in ("period_start", "period_end"))
    head = (
        f'<p class="meta">{name}: {start} to {end} UTC, '
        f"published {_time(digest.published_at)} UTC</p>"
    )
    if digest.content is None:
        body = f'<p class="error">{escape(digest.content_error or "")}</p>'
    elif digest.data.get("format") == "html":
        # Rendered as the page it is, sandboxed: no script of it runs, no cookie is shared.
        body = f'<iframe class="digest" sandbox srcdoc="{escape(digest.content)}"></iframe>'
    else:
        body = f"<pre>{escape(digest.content)}</pre>"
    return _section("Latest digest", head + body, "digest")
