"""`tickwork ticks`: the ticks of a window, newest first, a page at a time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.app import JsonOption, app, out, parse_since, print_json

if TYPE_CHECKING:
    from harness.config import Settings
    from harness.store import SqlEventStore

DEFAULT_SINCE = "24h"
PAGE = 50
"""Ticks a page holds unless `--limit` says: the option is unset by default, so a plain
`tickwork ticks` coerces no number (Typer would import pydantic to)."""
BY_HAND = "by hand"
"""How the lists mark a tick started by hand, as the service log does."""


@app.command()
def ticks(
    level: Annotated[
        list[str] | None, typer.Option("--level", "-l", help="Only this level (repeatable).")
    ] = None,
    status: Annotated[
        str | None, typer.Option(help="Only ticks that ended so (completed, failed, …).")
    ] = None,
    since: Annotated[
        str, typer.Option(help="30m, 12h, 7d or an ISO time: the window listed.")
    ] = DEFAULT_SINCE,
    limit: Annotated[
        int | None, typer.Option(min=1, max=1000, help="Ticks per page (default 50).")
    ] = None,
    before: Annotated[
        str | None, typer.Option(help="The next page: the cursor the last page printed.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Ticks newest first: how each ended, how long it ran (every attempt), its model, tokens, cost.

    A tick started by hand (`tickwork tick`, the dashboard's buttons) is marked `by hand`.

    A page walks the ticks read model's time index from the newest tick of the window
    (`--since`, default 24h) and stops after `--limit` rows, so it costs what the page
    holds, however long the history; the last line names the next page's command.
    """
    from harness.cli.answered import answer_or_read

    arguments = {
        "level": level,
        "status": status,
        "since": since,
        "limit": PAGE if limit is None else limit,
        "before": before,
        "as_json": as_json,
    }
    answer_or_read("ticks", arguments)


def print_ticks(
    config: Settings,
    store: SqlEventStore,
    level: list[str] | None,
    status: str | None,
    since: str,
    limit: int,
    before: str | None,
    as_json: bool,
) -> None:
    """The page `tickwork ticks` prints, read from `store`."""
    from harness.prices import PriceBook, format_usd, tick_cost
    from harness.projections import STATUSES, TickCursor, projector_for, tick_page
    from harness.timespec import as_utc

    if status is not None and status not in STATUSES:
        raise typer.BadParameter(
            f"{status!r}: choose one of {', '.join(STATUSES)}", param_hint="--status"
        )
    try:
        cursor = None if before is None else TickCursor.parse(before)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--before") from None
    start = parse_since(since)
    prices = PriceBook(config.prices)
    projector_for(store, prices).catch_up(["ticks"])
    page = tick_page(store, levels=level, status=status, since=start, before=cursor, limit=limit)
    listed: list[dict[str, Any]] = []
    for row in page.rows:
        took = (
            (row.finished_at - row.started_at).total_seconds()
            if row.started_at and row.finished_at
            else None
        )
        day = f"{row.sort_at:%Y-%m-%d}"
        cost = tick_cost(
            prices, row.model, day, row.prompt_tokens, row.completion_tokens, row.model_calls
        )
        listed.append(
            {
                "tick_id": row.tick_id,
                "level": row.level,
                "status": row.status,
                "at": as_utc(row.sort_at),
                "duration_seconds": took,
                "attempts": row.attempts,
                "manual": row.manual,
                "model": row.model,
                "prompt_tokens": row.prompt_tokens,
                "completion_tokens": row.completion_tokens,
                "tool_calls": row.tool_calls,
                "cost_usd": cost,
                "reason": row.reason,
            }
        )
    following = None if page.following is None else str(page.following)
    if as_json:
        print_json({"ticks": listed, "next_before": following})
        return
    if not listed:
        out.print(f"no tick since {start:%Y-%m-%d %H:%M:%S} UTC matches")
        return
    header = (
        "tick",
        "status",
        "at (UTC)",
        "took",
        "attempts",
        "model",
        "tokens",
        "USD",
        "how it ended",
    )
    lines = [header]
    for tick in listed:
        took = tick["duration_seconds"]
        lines.append(
            (
                tick["tick_id"],
                tick["status"] + (f" ({BY_HAND})" if tick["manual"] else ""),
                f"{tick['at']:%m-%d %H:%M:%S}",
                "" if took is None else f"{took:.1f} s",
                str(tick["attempts"] or ""),
                tick["model"] or "",
                f"{tick['prompt_tokens'] + tick['completion_tokens']:,}",
                format_usd(tick["cost_usd"]) if tick["model"] else "",
                tick["reason"] or "",
            )
        )
    # Plain columns, never cut: a tick id is what the operator copies into `show`.
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    for line in lines:
        out.print(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip(),
            highlight=False,
        )
    if following is not None:
        filters = [f"--level {name}" for name in level or ()]
        filters += [f"--status {status}"] if status else []
        filters += [f"--since {since}", f"--limit {limit}", f"--before '{following}'"]
        out.print(f"next page: tickwork ticks {' '.join(filters)}")
