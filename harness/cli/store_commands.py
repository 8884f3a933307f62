"""Commands over the store: init, migrate, events, spend, spool, projections."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer

from harness.cli.app import (
    app,
    ctrl_c,
    err,
    fail,
    out,
    parse_since,
    projections_app,
    settings,
    spool_app,
    state,
    store_for,
)

if TYPE_CHECKING:
    from harness.config import Settings
    from harness.projections import Projector, ReportGroup, SpendRow
    from harness.store import SqlEventStore, StoredEvent


@app.command()
def init(force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False) -> None:
    """Write a commented tickwork.toml with two levels (min, hour) and migrate the store."""
    from harness.devtools import example_config
    from harness.store import HEAD_REVISION, safe_url

    path = state.config or Path("tickwork.toml")
    if path.exists() and not force:
        out.print(f"{path} exists; leaving it as it is (--force overwrites)")
    else:
        path.write_text(example_config(), encoding="utf-8")
        out.print(f"wrote {path}")
    state.config = path
    config = settings()
    store_for(config).close()
    out.print(f"store ready: {safe_url(config.store.url)} (schema {HEAD_REVISION})")


@app.command()
def migrate() -> None:
    """Apply pending schema migrations (PostgreSQL stores are migrated only this way)."""
    from harness.store import HEAD_REVISION, StoreError, migrate_store, safe_url

    config = settings()
    try:
        before = migrate_store(config.store.url)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    if before == HEAD_REVISION:
        out.print(f"{safe_url(config.store.url)}: schema already at {HEAD_REVISION}")
    else:
        out.print(f"{safe_url(config.store.url)}: schema {before or 'none'} -> {HEAD_REVISION}")
    if config.executor.kind == "procrastinate":
        from harness.store import apply_procrastinate_schema

        store = store_for(config)
        try:
            was, now = apply_procrastinate_schema(store)
        except StoreError as exc:
            raise fail(f"procrastinate's schema: {exc}") from exc
        finally:
            store.close()
        done = f"already at {now}" if was == now else f"{was or 'none'} -> {now}"
        out.print(f"{safe_url(config.store.url)}: procrastinate's schema {done}")


def _event_json(event: StoredEvent) -> dict[str, Any]:
    record = event.as_dict()
    record["event_id"] = str(event.event_id)
    record["recorded_at"] = event.recorded_at.isoformat()
    return record


def _print_events(batch: list[StoredEvent], as_json: bool) -> None:
    if as_json:
        for event in batch:
            sys.stdout.write(orjson.dumps(_event_json(event)).decode() + "\n")
        sys.stdout.flush()
        return
    from harness.contracts import headline

    # One line each, never cut: the stream (a tick id to copy) and what the event says,
    # its fields that matter for its type; `--json` has every field.
    for event in batch:
        out.print(
            f"{event.global_position:>6} {event.recorded_at:%m-%d %H:%M:%S} "
            f"{event.stream_id}  {event.type}: {headline(event.type, event.data)}",
            highlight=False,
        )


@app.command()
def events(
    stream: Annotated[str | None, typer.Option(help="Only this stream, e.g. tick-<id>.")] = None,
    type_: Annotated[list[str] | None, typer.Option("--type", help="Only these types.")] = None,
    since: Annotated[
        str | None, typer.Option(help="30m, 12h, 7d or an ISO time (default: the last --limit).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many (before --follow).")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object a line.")] = False,
    follow: Annotated[bool, typer.Option(help="Keep printing new events (Ctrl-C stops).")] = False,
) -> None:
    """List events, oldest first; --follow polls for new ones."""
    start = parse_since(since) if since else None
    from harness.contracts import EVENT_TYPES

    types = set(type_) if type_ else None
    known = {name for name, _ in EVENT_TYPES}
    if types and not types <= known:
        unknown = f"unknown event type {', '.join(sorted(types - known))}"
        if not follow:
            raise fail(f"{unknown} (known: {', '.join(sorted(known))})", code=2)
        err.print(f"warning: {unknown}: following it in case a newer writer appends one")
    config = settings()
    store = store_for(config)
    try:
        with ctrl_c() as stop:
            printed = _list_events(store, stream, types, start, limit, as_json, follow, stop)
        if stream is not None and not printed:
            _say_where_archived(store, config, stream)
    finally:
        store.close()


def _say_where_archived(store: SqlEventStore, config: Settings, stream: str) -> None:
    """A tick stream with no event left in the store: which day's archive holds it, if any."""
    from harness.cli.show_command import where_archived
    from harness.contracts import tick_stream
    from harness.store import ArchiveError, find_archived

    tick_id = stream.removeprefix(tick_stream(""))
    if stream != tick_stream(tick_id):
        return
    try:
        found = find_archived(store, config.retention.archive, tick_id)
    except ArchiveError as exc:
        err.print(f"{stream}: {exc}")
        return
    if found is not None:
        err.print(f"{stream} {where_archived(config, tick_id, found[0])}")


def _list_events(
    store: SqlEventStore,
    stream: str | None,
    types: set[str] | None,
    start: datetime | None,
    limit: int,
    as_json: bool,
    follow: bool,
    stop: threading.Event,
) -> int:
    """Print the events asked for; following, poll for more until `stop` is set (Ctrl-C).

    Returns how many were printed.
    """
    if stream is not None:
        cursor = 0
    elif start is not None:
        cursor = store.first_position_since(start) - 1
    else:
        cursor = store.lookback(limit)
    printed = 0
    while not stop.is_set():
        if stream is not None:
            batch = store.read_stream(stream, after=cursor, limit=1000)
            cursor = batch[-1].stream_position if batch else cursor
        else:
            batch = store.read_all(cursor, 1000, types)
            cursor = batch[-1].global_position if batch else cursor
        shown = [
            event
            for event in batch
            if (types is None or event.type in types)
            and (start is None or event.recorded_at >= start)
        ]
        if not follow:
            shown = shown[: limit - printed]
        if shown:
            _print_events(shown, as_json)
            printed += len(shown)
        if not follow and (printed >= limit or not batch):
            return printed
        if not batch:
            stop.wait(0.5)
    return printed


@app.command()
def spend(
    by: Annotated[
        list[str] | None,
        typer.Option(
            help="Group by level, model, day, template (the prompt's version, a hash "
            "of its template; empty for spend that has none), target (the catalog "
            "target; empty for none), billing (api or subscription) and/or tag (the "
            "levels' `tags`; a level with two counts in both). Repeatable."
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="7d, 12h or an ISO date (UTC days); the last 30 days if not given (an "
            "early date for all of it)."
        ),
    ] = None,
    level: Annotated[list[str] | None, typer.Option(help="Only these levels.")] = None,
    prices_file: Annotated[
        Path | None,
        typer.Option(
            "--prices",
            help='A price card (TOML of [prices."MODEL"] tables): each row also says what '
            "its calls would have cost under it (models it leaves out at today's prices).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Token spend, its list value and what it was billed, from the spend projection.

    Each call is worth what it was booked at (`cost_usd`, list value; None for unpriced
    models) and billed that on `api`, 0 on a subscription (`billed_usd`); each row names
    the sources that priced it: `catalog:<target>`, `config`, `genai-prices@<version>`,
    `unpriced` (and counts the calls booked without a price, priced now).
    """
    from harness.config import ConfigError, load_price_card
    from harness.prices import format_usd
    from harness.projections import REPORT_GROUPS, projector_for, report_since, spend_by
    from harness.routing import CatalogError, price_book
    from harness.store import StoreError

    groups: list[ReportGroup] = []
    for name in by or ["level"]:
        if name not in REPORT_GROUPS:
            raise typer.BadParameter(f"--by {name!r}: choose {', '.join(REPORT_GROUPS)}")
        groups.append(name)
    first_day = report_since(parse_since(since).date() if since else None, datetime.now(UTC).date())
    config = settings()
    try:
        prices = price_book(config)
        card = prices.under(load_price_card(prices_file)) if prices_file else None
    except (CatalogError, ConfigError) as exc:
        raise fail(str(exc), 2) from exc
    store = store_for(config)
    try:
        projector_for(store, prices).catch_up(["spend"])
        tags = {name: list(config.tags) for name, config in config.levels.items()}
        rows = spend_by(store, prices, groups, tags, since=first_day, levels=level)
        under = spend_by(store, prices, groups, tags, first_day, level, card) if card else []
    except StoreError as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()
    repriced = {tuple(row.group.values()): row for row in under}
    if as_json:
        shown = [asdict(row) | _card_columns(repriced, row) for row in rows]
        sys.stdout.write(orjson.dumps(shown, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    if not rows:
        out.print(f"no spend recorded since {first_day.isoformat()}")
        return
    from rich.table import Column, Table

    # Names and figures are never cut: in a narrow terminal the sources wrap instead.
    def table(*columns: str, caption: str) -> Table:
        figures = (Column(name, no_wrap=True) for name in (*groups, *columns))
        return Table(*figures, "priced by", box=None, caption=caption)

    since_day = f"since {first_day.isoformat()} (UTC days)"
    booked = table(
        "prompt", "completion", "calls", "estimated", "list USD", "billed USD", caption=since_day
    )
    what_if = table("list USD", "billed USD", "list change", caption=f"under {prices_file}")
    for row in rows:
        sources = ", ".join(row.price_sources)
        if row.priced_when_read:
            sources += f" ({row.priced_when_read:,} calls booked unpriced, priced now)"
        if row.subscription_calls:
            sources += f" ({row.subscription_calls:,} calls on a subscription, billed 0)"
        booked.add_row(
            *row.group.values(),
            f"{row.prompt_tokens:,}",
            f"{row.completion_tokens:,}",
            f"{row.model_calls:,}",
            f"{row.estimated_calls:,}",
            format_usd(row.cost_usd),
            format_usd(row.billed_usd),
            sources,
        )
        if card:
            priced = _card_columns(repriced, row)
            what_if.add_row(
                *row.group.values(),
                *(
                    format_usd(priced[key])
                    for key in ("card_usd", "card_billed_usd", "difference_usd")
                ),
                ", ".join(priced["card_price_sources"]),
            )
    out.print(booked)
    if card:
        out.print(what_if)


def _card_columns(repriced: dict[tuple[str, ...], SpendRow], row: SpendRow) -> dict[str, Any]:
    """What `row`'s calls cost under the card beside what they were booked at (empty: no card)."""
    under = repriced.get(tuple(row.group.values()))
    if under is None:
        return {}
    both = None if under.cost_usd is None or row.cost_usd is None else under.cost_usd - row.cost_usd
    return {
        "card_usd": under.cost_usd,
        "card_billed_usd": under.billed_usd,
        "card_price_sources": under.price_sources,
        "card_unpriced_calls": under.unpriced_calls,
        "difference_usd": both,
    }


@spool_app.command("ingest")
def spool_ingest() -> None:
    """Append every spooled event to the store (idempotent: replays count nothing twice)."""
    from harness.store import Spool, StoreError, open_store

    config = settings()
    spool = Spool(config.paths.spool)
    try:
        store = open_store(config.store.url, durability=config.store.durability)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    try:
        report = spool.ingest(store)
    except StoreError as exc:
        raise fail(f"ingest stopped, the rest stays spooled: {exc}") from exc
    finally:
        store.close()
    out.print(
        f"ingested {report.files} file(s): {report.appended} appended, "
        f"{report.duplicates} already stored, {report.corrupt_lines} corrupt line(s) kept aside"
    )


@projections_app.command("rebuild")
def projections_rebuild(
    name: Annotated[
        str | None, typer.Argument(help="spend, ticks or calibration (default: all).")
    ] = None,
    reprice: Annotated[
        bool,
        typer.Option(
            help="Price the spend read model under today's prices (catalog, [prices], "
            "genai-prices), not as each call was booked; no event changes."
        ),
    ] = False,
) -> None:
    """Clear a read model and fold it again from the first event, archives included."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn

    from harness.projections import projector_for
    from harness.routing import CatalogError, price_book
    from harness.store import ArchiveError, positions_kept, recorded_archives

    config = settings()
    try:
        prices = price_book(config)
    except CatalogError as exc:
        raise fail(str(exc), 2) from exc
    if reprice and name not in (None, "spend"):
        raise fail(f"--reprice rewrites the spend read model, not {name}", code=2)
    store = store_for(config)
    try:
        projector: Projector = projector_for(store, prices, reprice=reprice)
        names = [name] if name else list(projector.projections)
        for each in names:
            try:
                projector.get(each)
            except KeyError as exc:
                raise fail(str(exc.args[0]), code=2) from exc
        try:
            # Every archive is checked whole before any read model is cleared.
            archives = recorded_archives(store, config.retention.archive)
        except ArchiveError as exc:
            raise fail(f"{exc}; no read model was changed", code=2) from exc
        # Each read model's fold passes the same rows: their positions are decoded once.
        with positions_kept():
            for each in names:
                started = time.perf_counter()
                with Progress(
                    f"[bold]{each}[/]",
                    BarColumn(),
                    MofNCompleteColumn(),
                    TimeElapsedColumn(),
                    console=err,
                ) as bar:
                    task = bar.add_task(each, total=None)

                    def advance(done: int, total: int, task: TaskID = task) -> None:
                        bar.update(task, completed=done, total=total)

                    spawned = projector.spawned
                    folded = projector.rebuild(each, advance, archives)
                processes = projector.spawned - spawned + 1
                out.print(
                    f"{each}: {folded:,} events folded in {time.perf_counter() - started:.2f} s"
                    + (f" by {processes} processes" if processes > 1 else "")
                )
    finally:
        store.close()
