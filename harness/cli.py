"""The `tickwork` command line (Typer + Rich).

Every command loads the configuration first (a bad file exits 2 naming the key), opens the
store (migrating the embedded SQLite store and ingesting any spool) and brings projections
up to date before it reports, so what it prints is never stale.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn
from rich.table import Table

from harness.config import ConfigError, Settings, load_settings
from harness.example_config import EXAMPLE_CONFIG
from harness.prices import PriceBook
from harness.projections import Projector, projector_for, spend_report
from harness.projections.spend import GroupBy
from harness.rag import RagError, build_index
from harness.runner import Runner, TickSetupError, new_tick_id
from harness.store import (
    HEAD_REVISION,
    Spool,
    SqlEventStore,
    StoredEvent,
    StoreError,
    current_revision,
    open_store,
    safe_url,
)
from harness.store import migrate_store as _migrate_store

app = typer.Typer(
    help="tickwork runs LLM agents on a schedule and keeps every token they spend as events.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
spool_app = typer.Typer(help="The local spool of events the store could not take.")
projections_app = typer.Typer(help="Read models folded from the event log.")
rag_app = typer.Typer(help="Retrieval over a folder of Markdown and text files.")
app.add_typer(spool_app, name="spool")
app.add_typer(projections_app, name="projections")
app.add_typer(rag_app, name="rag")

out = Console()
err = Console(stderr=True)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Config file (default: $TICKWORK_CONFIG or ./tickwork.toml)."
    ),
]


class _State:
    config: Path | None = None


_state = _State()


@app.callback()
def _root(config: ConfigOption = None) -> None:
    _state.config = config


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


def settings() -> Settings:
    try:
        return load_settings(_state.config)
    except ConfigError as exc:
        raise fail(str(exc), code=2) from exc


def store_for(config: Settings) -> SqlEventStore:
    try:
        return open_store(
            config.store.url,
            durability=config.store.durability,
            spool=Spool(config.paths.spool),
        )
    except StoreError as exc:
        raise fail(str(exc)) from exc


def parse_since(text: str) -> datetime:
    """`30m`, `12h`, `7d` ago, or an ISO date/time (naive means UTC)."""
    match = re.fullmatch(r"(\d+)([mhd])", text.strip())
    if match:
        unit = {"m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        return datetime.now(UTC) - timedelta(**{unit: int(match.group(1))})
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise typer.BadParameter(
            f"{text!r} is neither a duration like 30m, 12h, 7d nor an ISO date/time"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@app.command()
def init(force: Annotated[bool, typer.Option(help="Overwrite an existing file.")] = False) -> None:
    """Write a commented tickwork.toml with two levels (min, hour) and migrate the store."""
    path = _state.config or Path("tickwork.toml")
    if path.exists() and not force:
        out.print(f"{path} exists; leaving it as it is (--force overwrites)")
    else:
        path.write_text(EXAMPLE_CONFIG, encoding="utf-8")
        out.print(f"wrote {path}")
    _state.config = path
    config = settings()
    store_for(config).close()
    out.print(f"store ready: {safe_url(config.store.url)} (schema {HEAD_REVISION})")


@app.command()
def migrate() -> None:
    """Apply pending schema migrations (PostgreSQL stores are migrated only this way)."""
    config = settings()
    try:
        before = _migrate_store(config.store.url)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    if before == HEAD_REVISION:
        out.print(f"{safe_url(config.store.url)}: schema already at {HEAD_REVISION}")
    else:
        out.print(f"{safe_url(config.store.url)}: schema {before or 'none'} -> {HEAD_REVISION}")


@app.command()
def status() -> None:
    """The store, its schema, projections and spool at a glance."""
    config = settings()
    store = store_for(config)
    try:
        projector = projector_for(store, PriceBook(config.prices))
        projector.catch_up()
        last = store.last_position()
        table = Table(show_header=False, box=None)
        table.add_row("store", safe_url(config.store.url))
        table.add_row("schema", current_revision(store.engine) or "none")
        table.add_row("events", f"{last} (last global position)")
        for name, position in projector.checkpoints().items():
            table.add_row(f"projection {name}", f"at {position}, lag {last - position}")
        table.add_row("spool", f"{Spool(config.paths.spool).pending()} pending")
        table.add_row("levels", ", ".join(config.levels) or "none configured")
        out.print(table)
    finally:
        store.close()


def _event_json(event: StoredEvent) -> dict[str, Any]:
    record = asdict(event)
    record["event_id"] = str(event.event_id)
    record["recorded_at"] = event.recorded_at.isoformat()
    return record


def _print_events(batch: list[StoredEvent], as_json: bool) -> None:
    if as_json:
        for event in batch:
            sys.stdout.write(orjson.dumps(_event_json(event)).decode() + "\n")
        sys.stdout.flush()
        return
    table = Table("pos", "recorded (UTC)", "stream", "type", "data", box=None)
    for event in batch:
        summary = orjson.dumps(event.data).decode()
        table.add_row(
            str(event.global_position),
            event.recorded_at.strftime("%Y-%m-%d %H:%M:%S"),
            event.stream_id,
            event.type,
            summary if len(summary) <= 120 else summary[:117] + "...",
        )
    out.print(table)


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
    types = set(type_) if type_ else None
    store = store_for(settings())
    try:
        if stream is not None:
            cursor = 0
        elif start is not None:
            cursor = store.first_position_since(start) - 1
        else:
            cursor = max(store.last_position() - limit, 0)
        printed = 0
        while True:
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
                return
            if not batch:
                time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        store.close()


@app.command()
def spend(
    by: Annotated[
        list[str] | None, typer.Option(help="Group by level, model and/or day (repeatable).")
    ] = None,
    since: Annotated[str | None, typer.Option(help="7d, 12h or an ISO date (UTC days).")] = None,
    level: Annotated[list[str] | None, typer.Option(help="Only these levels.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Token spend and cost from the spend projection (cost is None for unpriced models)."""
    groups: list[GroupBy] = []
    for name in by or ["level"]:
        if name not in ("level", "model", "day"):
            raise typer.BadParameter(f"--by {name!r}: choose level, model or day")
        groups.append(name)  # type: ignore[arg-type]
    first_day: date | None = parse_since(since).date() if since else None
    config = settings()
    store = store_for(config)
    prices = PriceBook(config.prices)
    try:
        projector_for(store, prices).catch_up(["spend"])
        with store.read_transaction() as conn:
            rows = spend_report(conn, prices, by=groups, since=first_day, levels=level)
    except StoreError as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()
    if as_json:
        sys.stdout.write(
            orjson.dumps([asdict(row) for row in rows], option=orjson.OPT_INDENT_2).decode() + "\n"
        )
        return
    table = Table(*groups, "prompt", "completion", "calls", "estimated", "cost (USD)", box=None)
    for row in rows:
        cost = "unpriced" if row.cost_usd is None else f"{row.cost_usd:,.4f}"
        table.add_row(
            *row.group.values(),
            f"{row.prompt_tokens:,}",
            f"{row.completion_tokens:,}",
            f"{row.model_calls:,}",
            f"{row.estimated_calls:,}",
            cost,
        )
    if not rows:
        out.print("no spend recorded yet")
        return
    out.print(table)


@spool_app.command("ingest")
def spool_ingest() -> None:
    """Append every spooled event to the store (idempotent: replays count nothing twice)."""
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
    name: Annotated[str | None, typer.Argument(help="spend or ticks (default: all).")] = None,
) -> None:
    """Clear a read model and fold it again from the first event."""
    config = settings()
    store = store_for(config)
    try:
        projector: Projector = projector_for(store, PriceBook(config.prices))
        names = [name] if name else list(projector.projections)
        for each in names:
            try:
                projector.get(each)
            except KeyError as exc:
                raise fail(str(exc.args[0]), code=2) from exc
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

                folded = projector.rebuild(each, advance)
            out.print(f"{each}: {folded:,} events folded in {time.perf_counter() - started:.2f} s")
    finally:
        store.close()


@contextmanager
def upstream_for_ticks() -> Iterator[dict[str, str]]:
    """The worker environment: the real upstream if OPENAI_BASE_URL is set, else the fake."""
    if os.environ.get("OPENAI_BASE_URL"):
        yield dict(os.environ)
        return
    from harness.fake_llm import fake_upstream

    with fake_upstream() as fake:
        err.print(f"no OPENAI_BASE_URL set: ticks talk to tickwork's fake upstream at {fake.url}")
        yield {**os.environ, "OPENAI_BASE_URL": fake.url}


@app.command()
def tick(
    level: Annotated[str, typer.Argument(help="The level to run one tick of.")],
    prompt: Annotated[str | None, typer.Option(help="Instead of the level's prompt.")] = None,
    timeout: Annotated[
        float | None, typer.Option(min=0.1, help="Seconds (default: the level's timeout).")
    ] = None,
    wait: Annotated[bool, typer.Option(help="Wait for the tick and print its outcome.")] = True,
    tick_id: Annotated[str | None, typer.Option(hidden=True)] = None,
) -> None:
    """Run one tick now, through the same runner the scheduler uses."""
    config = settings()
    if not wait:
        tick_id = new_tick_id(level)
        command = [sys.argv[0], "tick", level, "--wait", "--tick-id", tick_id]
        if _state.config is not None:
            command[1:1] = ["--config", str(_state.config)]
        if prompt is not None:
            command += ["--prompt", prompt]
        if timeout is not None:
            command += ["--timeout", str(timeout)]
        subprocess.Popen(
            command,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        out.print(
            f"started tick {tick_id} (follow it: tickwork events --stream tick-{tick_id} --follow)"
        )
        return
    store = store_for(config)
    try:
        with upstream_for_ticks() as env:
            runner = Runner(config, store, env=env)
            try:
                prepared = runner.prepare(level, prompt=prompt, timeout=timeout, tick_id=tick_id)
            except TickSetupError as exc:
                raise fail(str(exc), code=2) from exc
            outcome = runner.run(prepared)
        spent = store.read_stream(f"tick-{outcome.tick_id}")
    finally:
        store.close()
    prompt_tokens = sum(e.data["prompt_tokens"] for e in spent if e.type == "BudgetSpent")
    completion_tokens = sum(e.data["completion_tokens"] for e in spent if e.type == "BudgetSpent")
    calls = sum(e.type == "BudgetSpent" for e in spent)
    out.print(f"tick    {outcome.tick_id}")
    out.print(f"status  {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else ""))
    out.print(
        f"tokens  {prompt_tokens:,} prompt + {completion_tokens:,} completion in {calls} call(s)"
    )
    out.print(f"result  {outcome.result_path}")
    if outcome.result is not None and outcome.result.text:
        out.print(outcome.result.text, highlight=False, markup=False)
    if outcome.status != "completed":
        raise typer.Exit(1)


@app.command("fake-llm")
def fake_llm(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = 8099,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
) -> None:
    """Serve tickwork's fake OpenAI-compatible upstream (scripts: POST /_script)."""
    import uvicorn

    from harness.fake_llm import create_app

    out.print(f"fake upstream on http://{host}:{port}/v1 (ledger: GET /_ledger)")
    uvicorn.run(create_app(), host=host, port=port, log_level="warning")


@rag_app.command("index")
def rag_index(
    folder: Annotated[Path | None, typer.Argument(help="Default: [rag] folder.")] = None,
) -> None:
    """Index a folder of Markdown and text files for the rag_lookup tool."""
    config = settings()
    source = folder or config.rag.folder
    if source is None:
        raise fail("no folder given and [rag] folder is not set", code=2)
    try:
        files, chunks = build_index(source, config.rag.index)
    except RagError as exc:
        raise fail(str(exc), code=2) from exc
    out.print(f"indexed {files} file(s), {chunks} passage(s) into {config.rag.index}")


def main() -> None:
    app()
