"""The `tickwork` Typer app and what every command shares.

Every command loads the configuration first (a bad file exits 2 naming the key), opens the
store (migrating the embedded SQLite store and ingesting any spool) and brings projections
up to date before it reports, so what it prints is never stale.

Typer imports every command module to register its command, so these modules import only
Typer, Rich and the standard library at module level: each command imports the stages it
needs when it runs, and `tickwork --help` or `tickwork status` never pays for the web
stack, the agent SDK or a driver it does not use (`tests/test_cli_imports.py` holds this).
"""

from __future__ import annotations

import copy
import inspect
import os
import signal
import sys
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from harness import timespec

if TYPE_CHECKING:
    from rich.console import Console

    from harness.config import Settings
    from harness.devtools import TickUpstream
    from harness.routing import Report, Router
    from harness.store import EventStore, SqlEventStore

# Help text is printed as written: docstrings name `[rag]` sections and regexes, and
# Rich markup would eat their brackets.
PLAIN_HELP = None

app = typer.Typer(
    help="tickwork runs LLM agents on a schedule and keeps every token they spend as events.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=PLAIN_HELP,
)
spool_app = typer.Typer(
    help="The local spool of events the store could not take.", rich_markup_mode=PLAIN_HELP
)
projections_app = typer.Typer(
    help="Read models folded from the event log.", rich_markup_mode=PLAIN_HELP
)
rag_app = typer.Typer(
    help="Retrieval over a folder of Markdown and text files.", rich_markup_mode=PLAIN_HELP
)
app.add_typer(spool_app, name="spool")
app.add_typer(projections_app, name="projections")
app.add_typer(rag_app, name="rag")


ANSWERING: ContextVar[tuple[Console, Console] | None] = ContextVar("answering", default=None)
"""`out` and `err` of a command a running service answers in this thread
(`harness.cli.answered`): its output goes to the asker, not to the service's own streams."""


class _Console:
    """A Rich console made on first use.

    `import typer, rich` is the floor of every command's start; Rich's console adds a
    third to it, which `--help` and a command that fails before printing need not pay.
    """

    def __init__(self, stream: int, **options: Any) -> None:
        self._stream = stream
        """Which of `ANSWERING`'s consoles stands in for this one: 0 out, 1 err."""
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    def __enter__(self) -> Console:
        """A Rich `Live` (a progress bar) holds its console as a context."""
        return self._made().__enter__()

    def __exit__(self, *exc: object) -> None:
        self._made().__exit__(*exc)

    def _made(self) -> Console:
        answering = ANSWERING.get()
        if answering is not None:
            return answering[self._stream]
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console


# Markup off: paths, level names, regexes and quoted errors print as they are (`[rag]`
# is text, not a style); the few styled lines ask for markup and escape what they quote.
CONSOLE_OPTIONS: dict[str, Any] = {"soft_wrap": True, "markup": False}
out = cast("Console", _Console(0, **CONSOLE_OPTIONS))
err = cast("Console", _Console(1, stderr=True, **CONSOLE_OPTIONS))
"""An error stays one greppable line."""


def _forget_consoles() -> None:
    """A forked child makes its consoles anew, for where its own output goes.

    Each was drawn for the streams and environment of the process that made it (its
    terminal's width and colours): a detached tick's owner writes to its log instead.
    """
    for console in (out, err):
        cast(_Console, console)._console = None


os.register_at_fork(after_in_child=_forget_consoles)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Config file (default: $TICKWORK_CONFIG or ./tickwork.toml)."
    ),
]


class State:
    """The root options: Typer hands them to the callback only, the commands read them here."""

    config: Path | None = None


state = State()


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        out.print(f"tickwork {version('tickwork')}")
        raise typer.Exit()


VersionOption = Annotated[
    bool,
    typer.Option(
        "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
    ),
]


@app.callback()
def _root(config: ConfigOption = None, version: VersionOption = False) -> None:
    from harness.contracts import keep_environment_private, redact_standard_streams

    redact_standard_streams()
    keep_environment_private()
    state.config = config


ROOT_VALUES = frozenset({"--config", "-c"})
"""The root options that take a value: the word after them names no command."""


def for_arguments(arguments: Sequence[str]) -> typer.Typer:
    """The app with only the command (or group) `arguments` name, or the app's listing.

    Typer builds every registered command (its signature, its type hints, an adapter per
    parameter) before it runs one: for sixty commands that was a fifth of `tickwork
    status`'s start. The root's own help, or a name no command has, gets every command as
    `listing` stands it in, so the list and the error are Typer's own; shell completion,
    which completes a command's options from the root, gets the whole app.
    """
    from typer.main import get_command_name

    words = iter(arguments)
    name = None
    for word in words:
        if word in ROOT_VALUES:
            next(words, None)
        elif not word.startswith("-"):
            name = word
            break
    commands = [
        info
        for info in app.registered_commands
        if info.callback is not None
        and get_command_name(info.name or info.callback.__name__) == name
    ]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        completing = any(variable.endswith("_COMPLETE") for variable in os.environ)
        return app if completing else listing(app)
    lean = copy.copy(app)
    lean.registered_commands, lean.registered_groups = commands, groups
    return lean


def listing(typer_app: typer.Typer) -> typer.Typer:
    """`typer_app` with each command, in its groups too, a stand-in of its name and help.

    The root's help lists a command's name and the first line of its help, and an unknown
    name's error suggests names: neither needs a command's parameters, whose building was
    two thirds of what `tickwork --help` adds to a bare `import typer, rich`.
    """
    from typer.main import get_command_name

    listed = copy.copy(typer_app)
    listed.registered_commands = []
    for info in typer_app.registered_commands:
        assert info.callback is not None, "Typer registers a command by its function"
        stand_in = copy.copy(info)
        stand_in.name = info.name or get_command_name(info.callback.__name__)
        help_text = info.help if info.help is not None else inspect.getdoc(info.callback)
        stand_in.help = help_text or ""
        stand_in.callback = _listed_only
        listed.registered_commands.append(stand_in)
    listed.registered_groups = []
    for group in typer_app.registered_groups:
        assert group.typer_instance is not None, "a group is added as a Typer app"
        stand_in_group = copy.copy(group)
        stand_in_group.typer_instance = listing(group.typer_instance)
        listed.registered_groups.append(stand_in_group)
    return listed


def _listed_only() -> None:
    """A stand-in is listed, never run: `for_arguments` gives a named command its own app."""
    raise RuntimeError("a command of the listing ran: `for_arguments` did not find its name")


JsonOption = Annotated[bool, typer.Option("--json", help="Print the data as JSON.")]


def print_rows(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A table drawn as Rich draws its default one, for a table that grows with levels.

    Rich measures and wraps every cell: 1,000 levels took `status` about a second. Plain
    cells need only their widths.
    """
    widths = [max([len(name), *(len(row[i]) for row in rows)]) for i, name in enumerate(headers)]

    def line(left: str, fill: str, cross: str, right: str) -> str:
        return left + cross.join(fill * (width + 2) for width in widths) + right

    def cells(values: Sequence[str], bar: str) -> str:
        padded = (f" {value:<{width}} " for value, width in zip(values, widths, strict=True))
        return bar + bar.join(padded) + bar

    drawn = [line("┏", "━", "┳", "┓"), cells(headers, "┃"), line("┡", "━", "╇", "┩")]
    drawn += [cells(row, "│") for row in rows]
    drawn.append(line("└", "─", "┴", "┘"))
    out.file.write("\n".join(drawn) + "\n")


def print_json(data: Any) -> None:
    """`data` as indented JSON on stdout: dataclasses, times and ids as orjson writes them."""
    import orjson

    answering = ANSWERING.get()
    stdout = sys.stdout if answering is None else answering[0].file
    stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")
    stdout.flush()


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an error as one greppable line and give the exit to raise (2: bad input)."""
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True)
    return typer.Exit(code)


def settings(needed: bool = False) -> Settings:
    """The configuration of `--config`; a bad file exits 2 naming the key, before any work.

    `needed`: the command works on what only a configuration names (its levels, digests,
    catalog), so without one it exits 2 pointing to `tickwork init` rather than report
    on an empty store it created in whatever folder it was run. Commands on the store
    alone (`migrate`, `events`, `serve` …) run on the defaults and `TICKWORK_*`.

    A configured catalog is part of the configuration: one that is invalid, or cannot
    route a level without a model of its own, is refused here too, not when the level's
    tick starts.
    """
    from harness.config import ConfigError

    if needed:
        config_file()
    try:
        return checked_settings(state.config)
    except ConfigError as exc:
        raise fail(str(exc), code=2) from exc


def config_file() -> Path:
    """The configuration file `--config` names or finds; without one, exits 2 as `settings`."""
    from harness.config import CONFIG_ENV, CONFIG_FILENAME, config_path

    path = config_path(state.config)
    if path is None:
        raise fail(
            f"no configuration here (no {CONFIG_FILENAME}, no ${CONFIG_ENV}): "
            "run `tickwork init` to create one",
            code=2,
        )
    return path


def checked_settings(explicit: Path | None) -> Settings:
    """The configuration and its catalog, or ConfigError saying what is wrong with either.

    What `settings` exits 2 on, for a caller that must not exit (a service answering
    `tickwork status` for another process).
    """
    from harness.config import ConfigError, config_path, load_settings
    from harness.contracts import utcnow
    from harness.prices import refuse_unpayable_budgets

    config = load_settings(explicit)
    where = str(config_path(explicit) or "environment/defaults")
    lanes: Collection[str] = ()
    if config.routing.catalog is not None:
        from harness.routing import CatalogError, configured_router

        try:
            router = configured_router(config)
        except CatalogError as exc:
            raise ConfigError(str(exc)) from exc
        assert router is not None  # a catalog is configured
        lanes = router.source.catalog.lanes.keys()
    refuse_unpayable_budgets(config, where, utcnow().date().isoformat(), lanes)
    return config


def router_or_exit(config: Settings, report: Report = lambda line: None) -> Router | None:
    """The configured router; an invalid catalog exits 2 before anything is stored."""
    if config.routing.catalog is None:
        return None
    from harness.routing import CatalogError, configured_router

    try:
        return configured_router(config, report)
    except CatalogError as exc:
        raise fail(str(exc), code=2) from exc


def store_for(config: Settings, connections: int | None = None) -> SqlEventStore:
    """The configured store, migrated if embedded and its spool ingested; failures exit 1.

    `connections`: the PostgreSQL pool a service needs (`harness.store.sizing`).
    """
    from harness.store import StoreError, configured_store

    try:
        return configured_store(config, connections)
    except StoreError as exc:
        raise fail(str(exc)) from exc


@contextmanager
def ctrl_c(*also: threading.Event) -> Iterator[threading.Event]:
    """Ctrl-C (SIGINT) sets the event (and `also`) instead of raising KeyboardInterrupt.

    For a command that polls until interrupted. Python raises KeyboardInterrupt only if
    SIGINT was not ignored when it started, and a background job of a non-interactive
    shell starts with it ignored: such a follower never stopped. Raised, the exception can
    also land inside a driver call or a pool lock. The loop checks the event between polls
    and waits on it instead of sleeping.
    """
    stop = threading.Event()

    def interrupt(*_: object) -> None:
        for event in (stop, *also):
            event.set()

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def end_on_sigterm() -> None:
    """SIGTERM ends an HTTP command as `tickwork run` ends: its clean-up done, exit status 0.

    uvicorn stops serving on SIGTERM, then raises the signal again for the handler it found.
    The default one ended the process there, before the command's own clean-up: the
    governor's ledger never wrote the events it had queued (the last ~50 ms of calibration
    samples and spend), and neither command closed its store (SQLite kept its WAL).
    """
    signal.signal(signal.SIGTERM, _exit_cleanly)


def _exit_cleanly(*_: object) -> None:
    raise SystemExit(0)


def parse_since(text: str) -> datetime:
    """`harness.timespec.parse_since`, its error reported as a bad option value."""
    try:
        return timespec.parse_since(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


@contextmanager
def upstream_for_ticks(store: EventStore | None = None) -> Iterator[TickUpstream]:
    """The ticks' upstream (`harness.devtools.upstream`), its warnings on stderr."""
    from harness.devtools import upstream_for_ticks

    with upstream_for_ticks(lambda line: err.print(line, highlight=False), store) as upstream:
        yield upstream
