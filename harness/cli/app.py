"""The `tickwork` Typer app and what every command shares.

Every command loads the configuration first (a bad file exits 2 naming the key), opens the
store (migrating the embedded SQLite store and ingesting any spool) and brings projections
up to date before it reports, so what it prints is never stale.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from harness import timespec
from harness.config import ConfigError, Settings, load_settings
from harness.contracts.secrets import API_KEY_ENV, redact_standard_streams
from harness.store import Spool, SqlEventStore, StoreError, open_store

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

# Markup off: paths, level names, regexes and quoted errors print as they are (`[rag]`
# is text, not a style); the few styled lines ask for markup and escape what they quote.
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, soft_wrap=True, markup=False)  # an error stays one greppable line

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Config file (default: $TICKWORK_CONFIG or ./tickwork.toml)."
    ),
]


class State:
    config: Path | None = None


state = State()


@app.callback()
def _root(config: ConfigOption = None) -> None:
    redact_standard_streams()
    state.config = config


def fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    return typer.Exit(code)


def settings() -> Settings:
    try:
        return load_settings(state.config)
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
    """`harness.timespec.parse_since`, its error reported as a bad option value."""
    try:
        return timespec.parse_since(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@contextmanager
def upstream_for_ticks() -> Iterator[dict[str, str]]:
    """The worker environment: the real upstream if OPENAI_BASE_URL is set, else the fake."""
    if os.environ.get("OPENAI_BASE_URL"):
        if not os.environ.get(API_KEY_ENV):
            err.print(
                f"[yellow]warning:[/] OPENAI_BASE_URL is set but {API_KEY_ENV} is not: "
                "an upstream that needs a key will refuse every call",
                markup=True,
            )
        yield dict(os.environ)
        return
    from harness.devtools.fake_llm import fake_upstream

    with fake_upstream() as fake:
        err.print(f"no OPENAI_BASE_URL set: ticks talk to tickwork's fake upstream at {fake.url}")
        yield {**os.environ, "OPENAI_BASE_URL": fake.url}
