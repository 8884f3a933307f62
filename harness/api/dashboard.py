"""The dashboard's panels, rendered on the server as one HTML fragment.

The page (`static/dashboard.html`) is an empty shell whose script fetches this fragment
every few seconds: no template engine, no chart library, no CDN; the spend chart is SVG
drawn here, so the page works offline and shows the same numbers as `/spend`.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from html import escape

from harness.api.models import Digest, Tick
from harness.api.reads import Reads
from harness.projections import SpendRow
from harness.projections.ticks import STATUSES, UNKNOWN
from harness.scheduling.status import Snapshot

TIMELINE_TICKS = 40
"""Recent ticks per level on the timeline."""
CHART_DAYS = 14
CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 720, 220, 40
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7")


def panels(reads: Reads) -> str:
    """The dashboard's panels as one HTML fragment, so a refresh replaces them in one swap."""
    status = reads.snapshot()
    levels = list(reads.settings.levels)
    since = status.taken_at.date() - timedelta(days=CHART_DAYS - 1)
    return "\n".join(
        (
            _overview(status),
            _in_flight(status),
            _workers(reads, status.taken_at),
            _paused(status),
            _timeline(
                levels,
                {level: reads.ticks(levels=[level], limit=TIMELINE_TICKS) for level in levels},
            ),
            _section(
                "Spend per day (tokens)",
                spend_chart(reads.spend(("day", "level"), since), status.taken_at, levels),
            ),
            _digest(reads.latest_digest()),
        )
    )


def _section(title: str, body: str, name: str = "") -> str:
    ident = f' id="{name}"' if name else ""
    return f"<section{ident}><h2>{escape(title)}</h2>{body}</section>"


def _table(headers: tuple[str, ...], rows: list[str]) -> str:
    head = "".join(f"<th>{escape(name)}</th>" for name in headers)
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def _time(value: datetime | None) -> str:
    return "" if value is None else f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def _overview(status: Snapshot) -> str:
    lag = ", ".join(f"{name} {behind}" for name, behind in status.projection_lag.items())
    rows = []
    for level in status.levels:
        cells = (
            level.name,
            level.schedule,
            _time(level.next_slot),
            "paused" if level.paused else "active",
            *level.against_budget(),
        )
        rows.append("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in cells) + "</tr>")
    return _section(
        "Levels",
        f'<p class="meta">store at {status.store_position}, projection lag: {escape(lag)}; '
        f"updated {_time(status.taken_at)} UTC</p>"
        + _table(
            (
                "level",
                "schedule",
                "next slot (UTC)",
                "state",
                "tokens today / budget",
                "USD today / budget",
            ),
            rows,
        ),
        "levels",
    )


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
            f"<td>{escape(tick.tick_id)}</td><td>{escape(tick.level)}</td>"
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


def _paused(status: Snapshot) -> str:
    if not status.paused_levels:
        return _section("Paused levels", '<p class="empty">none</p>', "paused")
    items = "".join(
        f'<li><span class="level">{escape(name)}</span> '
        f'<button type="button" data-resume="{escape(name)}">Resume</button></li>'
        for name in status.paused_levels
    )
    return _section("Paused levels", f"<ul>{items}</ul>", "paused")


def _timeline(levels: list[str], recent: dict[str, list[Tick]]) -> str:
    rows = []
    for level in levels:
        marks = "".join(
            f'<span class="mark s-{escape(tick.status)}" title="{escape(tick.tick_id)}: '
            f'{escape(tick.status)}{escape(": " + tick.reason) if tick.reason else ""}"></span>'
            for tick in reversed(recent[level])
        )
        rows.append(f'<div class="lane"><span class="level">{escape(level)}</span>{marks}</div>')
    legend = "".join(
        f'<span class="key"><span class="mark s-{s}"></span>{s.replace("_", " ")}</span>'
        for s in STATUSES
        if s != UNKNOWN
    )
    return _section(
        f"Recent ticks (last {TIMELINE_TICKS} per level, oldest left)",
        f'{"".join(rows)}<p class="legend">{legend}</p>',
        "timeline",
    )


def spend_chart(rows: list[SpendRow], now: datetime, levels: list[str]) -> str:
    """Stacked bars of tokens per UTC day, one colour per level, for the last CHART_DAYS."""
    days = [(now.date() - timedelta(days=back)).isoformat() for back in reversed(range(CHART_DAYS))]
    tokens: dict[str, dict[str, int]] = defaultdict(dict)
    for row in rows:
        tokens[row.group["day"]][row.group["level"]] = row.prompt_tokens + row.completion_tokens
    names = levels + sorted({level for day in tokens.values() for level in day} - set(levels))
    colour = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}
    top = max((sum(day.values()) for day in tokens.values()), default=0) or 1
    plot_height = CHART_HEIGHT - 2 * CHART_PAD
    step = (CHART_WIDTH - 2 * CHART_PAD) / CHART_DAYS
    parts = [
        '<svg class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" '
        'aria-label="tokens per day per level">',
        f'<text x="{CHART_PAD}" y="{CHART_PAD - 12}">max {top:,} tokens/day</text>',
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
                f"<title>{escape(name)} {day}: {value:,} tokens</title></rect>"
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
    return "".join(parts) + f'<p class="legend">{legend}</p>'


def _digest(digest: Digest | None) -> str:
    if digest is None:
        return _section("Latest digest", '<p class="empty">no digest published yet</p>', "digest")
    name, start, end = (
        escape(str(digest.data.get(key, "?"))) for key in ("name", "period_start", "period_end")
    )
    head = (
        f'<p class="meta">{name}: {start} to {end}, published {_time(digest.published_at)} UTC</p>'
    )
    body = (
        f"<pre>{escape(digest.content)}</pre>"
        if digest.content is not None
        else f'<p class="error">{escape(digest.content_error or "")}</p>'
    )
    return _section("Latest digest", head + body, "digest")
