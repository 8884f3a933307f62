"""A tick as a story: its events in order, why it ended, its result and its log, as HTML.

Every event of the tick's stream becomes one line, whatever its type: a sentence for the
types tickwork knows, and all its fields under the line for any type, so events added
later (model calls, transcript items) show up without more work here. The same line is
what the page shows on load and what `/ticks/{id}/stream` sends while the tick runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any

from harness.api.html_parts import section, table
from harness.api.models import Event, TickDetail
from harness.contracts import (
    HIDDEN_FIELDS,
    TERMINAL_TYPES,
    TickCompleted,
    TickScheduled,
    TickStarted,
    redact,
    tick_stream,
)
from harness.contracts import headline as event_headline
from harness.prices import PriceBook
from harness.projections import (
    OPEN,
    SPEND_COLUMNS,
    TickNow,
    TickSpend,
    calls_said,
    spend_per_call,
    tick_now,
    usd_words,
)
from harness.store import EventStore

LOG_TAIL_BYTES = 64 * 1024
"""How much of the end of a tick's log the page shows (and how much one update sends)."""
FIELD_CHARS = 2000
"""A field longer than this is cut on the page, the cut marked; `/ticks/{id}` has it whole."""
POLL_SECONDS = 0.5
HEARTBEAT_SECONDS = 15.0
"""A comment line this often keeps proxies from closing a quiet stream."""


def utc(value: datetime | None) -> str:
    """A time as the pages show every time: UTC, to the second, saying so."""
    return "" if value is None else f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def headline(event: Event) -> str:
    """What the event says in one sentence (`harness.contracts.headlines`)."""
    return event_headline(event.type, event.data)


def _field(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) > FIELD_CHARS:
        text = text[:FIELD_CHARS] + f"… [cut: {len(text) - FIELD_CHARS:,} more characters]"
    return escape(text)


def line(event: Event) -> str:
    """One event as an `<li>`: its time, type and headline, and all its fields folded."""
    fields = "".join(
        f"<dt>{escape(key)}</dt><dd>{_field(value)}</dd>"
        for key, value in event.data.items()
        if key not in HIDDEN_FIELDS and value not in (None, "", [], {})
    )
    details = f"<details><summary>fields</summary><dl>{fields}</dl></details>" if fields else ""
    return redact(
        f'<li class="ev t-{escape(event.type)}" data-position="{event.stream_position}">'
        f"<time>{f'{event.recorded_at.astimezone(UTC):%H:%M:%S.%f}'[:-3]}</time> "
        f'<span class="type">{escape(event.type)}</span> '
        f'<span class="what">{escape(headline(event))}</span>{details}</li>'
    )


def ended(events: list[Event]) -> Event | None:
    """The tick's terminal event, once it has one."""
    return next((e for e in reversed(events) if e.type in TERMINAL_TYPES), None)


def log_path(events: list[Event]) -> Path | None:
    """The log of the tick's latest attempt, as its TickStarted names it."""
    started = [e for e in events if e.type == TickStarted.type and e.data.get("log_path")]
    return Path(started[-1].data["log_path"]) if started else None


def read_log(path: Path, start: int = 0) -> tuple[str, int]:
    """The log's text from `start` (at most its last LOG_TAIL_BYTES), redacted; and its end.

    A `start` past the end (a client's offset from a longer log) reads nothing.
    """
    try:
        with path.open("rb") as log:
            end = log.seek(0, 2)
            log.seek(min(max(start, end - LOG_TAIL_BYTES), end))
            data = log.read()
    except OSError:
        return "", start
    return redact(data.decode("utf-8", errors="replace")), end


def _revision(events: list[Event]) -> str:
    """The levels' revision the tick was claimed under, shortened as the CLI shows it."""
    claim = next((e for e in events if e.type == TickScheduled.type), None)
    revision = claim.data.get("config_revision") if claim else None
    return str(revision)[:12] if revision else ""


def now_line(now: TickNow | None) -> str:
    """Where the tick in flight stands (`harness.projections.moment`); empty once it ended.

    Its times are absolute, so the line an open page shows does not go stale between
    the events that replace it (`follow` sends it anew with each batch).
    """
    said = "" if now is None else escape(now.words())
    return f'<p id="now" class="now">{said}</p>'


def page(detail: TickDetail, tick_id: str, prices: PriceBook) -> str:
    """The tick page's sections: summary and why it ended, the story, spend, result, log."""
    last = ended(detail.events)
    now = tick_now(detail.events)
    tick = detail.tick
    status = tick.status if tick else ("ended" if last else "recorded")
    rows = [
        ("level", tick.level if tick else ""),
        ("status", status),
        ("scheduled", utc(tick.scheduled_at) if tick else ""),
        ("started", utc(tick.started_at) if tick else ""),
        ("finished", utc(tick.finished_at) if tick else ""),
        ("levels revision", _revision(detail.events)),
    ]
    if tick:
        rows.append(("model", tick.model or ""))
        if tick.queue_wait_seconds is not None:
            rows.append(("queue wait", f"{tick.queue_wait_seconds:,.1f} s"))
        rows.append(
            (
                "spend",
                f"{tick.prompt_tokens:,} + {tick.completion_tokens:,} tokens in "
                + calls_said(tick.model_calls, tick.tool_calls, tick.tool_calls_cancelled)
                + (f", call {now.call} in flight" if now and now.doing == "calling" else ""),
            )
        )
    table = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows if v)
    rerun = (
        f' <button type="button" id="rerun" data-rerun="{escape(tick_id)}">Run again</button>'
        if last and last.type != TickCompleted.type and tick is not None
        else ""
    )
    why = (
        f'<p class="why s-{escape(status)}">{escape(headline(last))}{rerun}</p>'
        if last
        else '<p class="why running">in flight <button type="button" id="cancel" '
        f'data-cancel="{escape(tick_id)}">Cancel this tick</button></p>'
    )
    after = detail.events[-1].stream_position if detail.events else 0
    state = "true" if last else "false"
    story = "".join(line(event) for event in detail.events)
    summary = (
        f'<section id="summary"><h2>Tick {escape(tick_id)}</h2>{why}{now_line(now)}'
        f"<table>{table}</table>"
        "</section>"
    )
    return "\n".join(
        (
            summary,
            f'<section id="story" data-after="{after}" data-ended="{state}">'
            '<h2>Story <span class="meta">(times UTC)</span></h2>'
            f'<ol id="events">{story}</ol></section>',
            _spend(spend_per_call(tick_id, detail.events, prices)),
            _result(detail),
            _log(detail.events),
        )
    )


def _spend(spent: TickSpend) -> str:
    """Why the tick cost what it did, as `tickwork show --spend` prints it.

    Its calls' parts and USD, the tool results that grew its input most, and the method.
    """
    if not spent.calls:
        return section("Spend", '<p class="empty">no model call booked (yet)</p>', "spend")
    calls = [
        "<tr>"
        + "".join(f"<td>{escape(cell)}</td>" for cell in call.cells())
        + f"<td>{escape(call.model)}{' (estimated)' if call.estimated else ''}</td>"
        + f"<td>{escape(', '.join(call.tool_results))}</td></tr>"
        for call in spent.calls
    ]
    tools = [
        f"<tr><td>{escape(tool.tool)}</td><td>{tool.after_call}</td><td>{tool.share:,}</td>"
        f"<td>{tool.later_calls}</td><td>{tool.added:,}</td></tr>"
        for tool in spent.tool_results
    ]
    body = (
        f'<p class="meta">{len(spent.calls)} model call(s), {usd_words(spent)}</p>'
        + table((*SPEND_COLUMNS, "model", "after tool results"), calls)
        + "<h3>Tool results by the input they added to the calls after them</h3>"
        + (
            table(("tool", "after call", "share", "sent again by", "input added"), tools)
            if tools
            else '<p class="empty">no tool result grew the input of a later call</p>'
        )
        + f'<p class="meta legend">How: {escape(spent.method)}</p>'
    )
    return section("Spend", body, "spend")


def _result(detail: TickDetail) -> str:
    if detail.result_error:
        body = f'<p class="error">{escape(detail.result_error)}</p>'
    elif detail.result is None and detail.tick is not None and detail.tick.status in OPEN:
        body = '<p class="empty">none yet: the tick writes its result when it ends</p>'
    elif detail.result is None:
        body = '<p class="empty">no result file</p>'
    else:
        text = str(detail.result.get("text") or "")
        stop = detail.result.get("stop_reason")
        body = (f'<p class="meta">stop reason {escape(str(stop))}</p>' if stop else "") + (
            f"<pre>{escape(redact(text))}</pre>" if text else '<p class="empty">empty text</p>'
        )
    return f'<section id="result"><h2>Result</h2>{body}</section>'


def _log(events: list[Event]) -> str:
    path = log_path(events)
    if path is None:
        return '<section id="log"><h2>Log</h2><p class="empty">no log (not started)</p></section>'
    text, end = read_log(path)
    if not text and (last := ended(events)) is not None:
        text = str(last.data.get("stderr_tail") or "")  # the log is gone: what its end kept
    return (
        f'<section id="log" data-end="{end}"><h2>Log</h2><p class="meta">{escape(str(path))}</p>'
        + (
            f'<pre id="log-text">{escape(text)}</pre>'
            if text
            else '<pre id="log-text" data-empty="true">(empty so far)</pre>'
        )
        + "</section>"
    )


def sse(kind: str, data: str) -> str:
    """One server-sent event (each line of `data` its own `data:` field)."""
    return f"event: {kind}\n" + "".join(f"data: {part}\n" for part in data.split("\n")) + "\n"


def follow(store: EventStore, tick_id: str, after: int, log_from: int) -> Iterator[str]:
    """Server-sent events of a tick as they are recorded, until it ends.

    `story` events carry a line for each new event, `now` where the tick stands after
    them (`now_line`), `log` events what its log gained, and `end` says the tick has
    ended (the stream closes then): at once when it ended among the events up to
    `after`, which the client says it knows.
    """
    stream, quiet_since = tick_stream(tick_id), time.monotonic()
    known = [Event.of(event) for event in store.read_stream(stream, limit=after)]
    log, done = log_path(known), ended(known) is not None
    while True:
        stored = store.read_stream(stream, after=after)
        events = [Event.of(event) for event in stored]
        for event in events:
            after = event.stream_position
            yield sse("story", line(event))
            if event.type == TickStarted.type and event.data.get("log_path"):
                log = Path(event.data["log_path"])
        if events:
            known += events
            yield sse("now", now_line(tick_now(known)))
        if log is not None:
            text, log_from = read_log(log, log_from)
            if text:
                yield sse("log", text)
        if done or ended(events) is not None:
            yield sse("end", str(after))
            return
        if events:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > HEARTBEAT_SECONDS:
            quiet_since = time.monotonic()
            yield ": still running\n\n"
        time.sleep(POLL_SECONDS)
