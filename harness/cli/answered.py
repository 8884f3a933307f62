"""`status`, `ticks` and `show`: asked of the running service first, read from the store otherwise.

An operator types these often, and reading the store means importing the configuration's
models, SQLAlchemy and the read models, and folding what the read models have not seen:
most of a second before a line is printed. A `tickwork run` of the same configuration
holds all of that already, so it answers on a local socket (`harness.local_socket`, named
by `harness.config.service_socket`) and the asking command imports Typer, Rich and the
standard library only. Without such a service, or if it declines, the command reads the
store itself.

Both ways run the same function on the same arguments (`ANSWERED`): the service runs it
with `out`, `err` and `print_json` writing to buffers drawn for the asker's terminal
(`harness.cli.app.ANSWERING`), and the asker writes what they hold to its own streams.
"""

from __future__ import annotations

import importlib
import io
import os
import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness.cli.app import (
    ANSWERING,
    CONSOLE_OPTIONS,
    checked_settings,
    config_file,
    settings,
    store_for,
)

if TYPE_CHECKING:
    from harness.config import Settings
    from harness.scheduling import Companion
    from harness.store import SqlEventStore

ANSWERS_VERSION = 4
"""Of the questions and what a command prints: a service started before an upgrade declines
a question of another version, and the command reads the store itself."""

TERMINAL_VARIABLES = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM", "COLORTERM")
"""What Rich reads from the environment to draw: the asker's, not the service's."""

Printer = Callable[..., None]
"""A command's work once its configuration and store are open: it prints through `out`."""


class Declined(Exception):
    """The service does not answer this question: the command reads the store itself."""


def answer_or_read(command: str, arguments: dict[str, Any], needed: bool = False) -> None:
    """Print the running service's answer to `command`, or run it here on the store.

    `needed`: as `settings(needed=...)`, for the command reading the store itself.
    """
    if _answered(command, arguments):
        return
    config = settings(needed=needed)
    store = store_for(config)
    try:
        printer(command)(config, store, **arguments)
    finally:
        store.close()


def _answered(command: str, arguments: dict[str, Any]) -> bool:
    """True when the service answered and its answer is printed (an exit raised as it said)."""
    from harness.config import service_socket
    from harness.local_socket import ask

    path = config_file()
    answer = ask(service_socket(path), question(command, arguments, path))
    if not isinstance(answer, dict):
        return False
    if isinstance(answer.get("bad_parameter"), str):
        raise typer.BadParameter(answer["bad_parameter"], param_hint=answer.get("param_hint"))
    stdout, stderr, code = answer.get("stdout"), answer.get("stderr"), answer.get("code")
    if not isinstance(stdout, str) or not isinstance(stderr, str) or not isinstance(code, int):
        return False
    sys.stdout.write(stdout)
    sys.stdout.flush()
    sys.stderr.write(stderr)
    if code:
        raise typer.Exit(code)
    return True


def question(command: str, arguments: dict[str, Any], config: Path) -> dict[str, Any]:
    """What a command asks the service of `config`, for this process's terminal."""
    return {
        "version": ANSWERS_VERSION,
        "command": command,
        "arguments": arguments,
        "config": str(config),
        "terminal": _terminal(),
    }


def _terminal() -> dict[str, Any]:
    """What the service needs to draw for this process's streams as its own console would."""
    stdout, stderr = sys.stdout.isatty(), sys.stderr.isatty()
    size = shutil.get_terminal_size() if stdout or stderr else None
    return {
        "stdout": stdout,
        "stderr": stderr,
        "columns": size.columns if size else None,
        "lines": size.lines if size else None,
        "env": {name: os.environ[name] for name in TERMINAL_VARIABLES if name in os.environ},
    }


ANSWERED = {
    "status": "harness.cli.status_command:print_status",
    "ticks": "harness.cli.ticks_command:print_ticks",
    "show": "harness.cli.show_command:print_show",
}
"""Each command a service answers, and the function it runs (`module:function`)."""


def printer(command: str) -> Printer:
    """The function `command` runs on an open configuration and store (`ANSWERED`)."""
    module, name = ANSWERED[command].split(":")
    found: Printer = getattr(importlib.import_module(module), name)
    return found


@contextmanager
def printing_to(terminal: Any) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """`out`, `err` and `print_json` of this thread write to buffers, drawn for `terminal`."""
    from rich.console import Console

    if not isinstance(terminal, dict) or not isinstance(terminal.get("env"), dict):
        raise Declined("no terminal described")
    env = {str(name): str(value) for name, value in terminal["env"].items()}
    buffers = io.StringIO(), io.StringIO()

    def console(buffer: io.StringIO, isatty: bool) -> Console:
        columns, lines = terminal.get("columns"), terminal.get("lines")
        return Console(
            file=buffer,
            force_terminal=True if isatty else None,
            width=columns if isatty and isinstance(columns, int) else None,
            height=lines if isatty and isinstance(lines, int) else None,
            _environ=env,
            **CONSOLE_OPTIONS,
        )

    consoles = (
        console(buffers[0], terminal.get("stdout") is True),
        console(buffers[1], terminal.get("stderr") is True),
    )
    token = ANSWERING.set(consoles)
    try:
        yield buffers
    finally:
        ANSWERING.reset(token)


def command_answers(
    served: Settings, config_path: Path, store: SqlEventStore, report: Callable[[str], None]
) -> Companion:
    """The running service's side: the commands of `ANSWERED` on its configuration, here.

    Each answer reads the configuration file anew, as the command would: an edited file
    shows its levels. A broken one does not keep the operator from `status`: the service
    answers with what it runs (the configuration it loaded, reloads included) and says
    first that the file is bad and why; `ticks` and `show` are declined, and the command
    refuses the file itself. Only the service's own file is read; a file edited to name
    another store is declined, and the command reads that store itself.
    """
    from harness.config import ConfigError, service_socket
    from harness.local_socket import NotServed, serve

    socket = service_socket(config_path)

    def answer(question: Any) -> dict[str, Any] | None:
        if not isinstance(question, dict) or question.get("version") != ANSWERS_VERSION:
            return None
        asked = Path(str(question.get("config")))
        command, arguments = question.get("command"), question.get("arguments")
        if asked.resolve() != config_path.resolve() or command not in ANSWERED:
            return None
        if not isinstance(arguments, dict):
            return None
        try:
            config = checked_settings(asked)  # its errors name the file as the asker does
        except ConfigError as exc:
            if command != "status":
                return None
            config, arguments = served, {**arguments, "bad_file": str(exc)}
        if config.store.url != served.store.url:
            return None
        try:
            with printing_to(question.get("terminal")) as (stdout, stderr):
                code = _exit_code(printer(str(command)), config, store, arguments)
        except Declined:
            return None
        except typer.BadParameter as exc:
            return {"bad_parameter": exc.message, "param_hint": exc.param_hint}
        return {"stdout": stdout.getvalue(), "stderr": stderr.getvalue(), "code": code}

    def run(stopping: threading.Event) -> None:
        try:
            serve(socket, answer, stopping, lambda exc: report(f"command not answered: {exc!r}"))
        except NotServed as exc:
            report(f"`tickwork status`, `ticks` and `show` read the store themselves: {exc}")

    return run


def _exit_code(
    print_it: Printer, config: Settings, store: SqlEventStore, arguments: dict[str, Any]
) -> int:
    """Run the command's printer; the exit it raised as a code (0 when it ended well)."""
    try:
        print_it(config, store, **arguments)
    except typer.Exit as exc:
        return exc.exit_code
    return 0
