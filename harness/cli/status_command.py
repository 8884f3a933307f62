"""`tickwork status`: asked of the running service first, read from the store otherwise.

An operator types `status` often, and reading it from the store means importing the
configuration's models, SQLAlchemy, the read models and APScheduler, and folding what the
read models have not seen: most of a second before a line is printed. A `tickwork run`
of the same configuration holds all of that already, so it answers on a local socket
(`harness.local_socket`, named by `harness.config.service_socket`) and the command
imports Typer, Rich and the standard library only. Without such a service, or if it
gives no answer, the command reads the store itself.

Both ways print the same: the service builds the same blocks from the same code
(`status_blocks`), from the configuration file as it is now, and the command draws them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.app import (
    JsonOption,
    app,
    checked_settings,
    config_file,
    fail,
    out,
    print_json,
    print_rows,
    settings,
    store_for,
)

if TYPE_CHECKING:
    from harness.config import Settings
    from harness.scheduling import Companion, LevelStatus
    from harness.store import SqlEventStore

Block = list[Any]
"""One thing printed, as JSON carries it: `["pairs", rows]` (a borderless two-column
table), `["line", text]`, `["grid", headers, rows]` (`print_rows`), `["table", headers,
rows]` (a Rich table) or `["json", data]` (`--json`)."""

BLOCKS_VERSION = 3
"""Of what a block holds: a service started before an upgrade declines a command whose
blocks differ from its own, and the command reads the store itself."""

IN_FORCE = "in force; the file on disk is not"
"""Whose levels a service answering on a bad file shows: what it loaded, not the file."""


@app.command()
def status(
    as_json: JsonOption = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Each read model's checkpoint and lag too.")
    ] = False,
) -> None:
    """The store, levels, ticks in flight and today's spend at a glance.

    `--json` is the body of the API's `GET /status`, with the store's own lines added.
    """
    from harness.config import service_socket
    from harness.local_socket import ask

    path = config_file()
    question = {"json": as_json, "verbose": verbose, "blocks": BLOCKS_VERSION, "config": str(path)}
    answer = ask(service_socket(path), question)
    if isinstance(answer, dict) and "error" in answer:
        raise fail(str(answer["error"]), code=int(answer.get("code", 1)))
    if isinstance(answer, dict) and isinstance(answer.get("blocks"), list):
        print_blocks(answer["blocks"])
        return
    config = settings(needed=True)
    store = store_for(config)
    try:
        print_blocks(status_blocks(config, store, as_json, verbose))
    finally:
        store.close()


def print_blocks(blocks: list[Block]) -> None:
    """Draw what `status_blocks` built, here or in the service that answered."""
    from rich.table import Table

    for kind, *parts in blocks:
        if kind == "json":
            print_json(parts[0])
        elif kind == "line":
            out.print(parts[0], markup=False)  # `[runner]` is a section, not a style
        elif kind == "grid":
            print_rows(parts[0], parts[1])
        else:
            headers, rows = (None, parts[0]) if kind == "pairs" else parts
            table = Table(show_header=False, box=None) if headers is None else Table(*headers)
            for row in rows:
                table.add_row(*row)
            out.print(table)


def status_blocks(
    config: Settings,
    store: SqlEventStore,
    as_json: bool,
    verbose: bool = False,
    whose: str = "this file",
) -> list[Block]:
    """What `tickwork status` prints, read at one moment, as plain data.

    `whose`: where `config` came from (`reload_lines`).

    The read models' checkpoints and lags are tickwork's internals: `--verbose` shows them.
    """
    from harness.scheduling import last_reload, levels_revision, refresh, reload_lines, snapshot
    from harness.store import Spool, current_revision, safe_url

    status_now = snapshot(config, store, refresh(config, store))
    if as_json:
        from harness.api import Status

        reloaded = last_reload(store)
        data = {
            "store": safe_url(config.store.url),
            "schema": current_revision(store.engine),
            "spool_pending": Spool(config.paths.spool).pending(),
            "levels_revision": levels_revision(config.levels),
            "last_reload": (
                reloaded.model_dump(mode="json", exclude={"event_id"}) if reloaded else None
            ),
            **Status.of(status_now).model_dump(mode="json"),
            "cancel_scopes": [
                scope.model_dump(mode="json", exclude={"event_id"})
                for scope in status_now.cancel_scopes
            ],
        }
        return [["json", data]]
    pairs = [
        ["store", safe_url(config.store.url)],
        ["schema", current_revision(store.engine) or "none"],
        ["events", f"{status_now.store_position} (last global position)"],
        *(
            [f"projection {name}", f"at {status_now.checkpoints[name]}, lag {lag}"]
            for name, lag in status_now.projection_lag.items()
            if verbose
        ),
        ["spool", f"{Spool(config.paths.spool).pending()} pending"],
        *([name, value] for name, value in reload_lines(config, store, whose)),
    ]
    blocks: list[Block] = [["pairs", pairs]]
    blocks += [["line", line] for line in status_now.liveness()]
    now = status_now.taken_at
    if config.levels:
        headers = ["level", "schedule", "next slot", "paused"]
        headers += ["tokens today / budget", "USD today / budget"]
        rows = [
            [
                level.name,
                level.schedule,
                _next_slot(level),
                "PAUSED" if level.paused else "",
                *level.against_budget(),
            ]
            for level in status_now.levels
        ]
        blocks.append(["grid", headers, rows])
        blocks += [
            ["line", f"level {level.name} is refused: {level.refused}"]
            for level in status_now.levels
            if level.refused
        ]
    else:
        blocks.append(["line", "levels: none configured"])
    capacity = status_now.capacity
    if capacity is not None and capacity.levels:
        blocks.append(["line", f"capacity: {capacity.words()}"])
        warning = capacity.warning()
        if warning is not None:
            blocks.append(["line", warning])
    flying = status_now.in_flight
    if flying:
        rows = []
        for tick in flying:
            waited, runtime = tick.waited(now), tick.runtime(now)
            rows.append(
                [
                    tick.tick_id,
                    tick.level,
                    tick.status,
                    "" if waited is None else f"{waited:.1f}",
                    "" if runtime is None else f"{runtime:.1f}",
                ]
            )
        blocks.append(["table", ["tick", "level", "status", "waited (s)", "running (s)"], rows])
    else:
        blocks.append(["line", "no tick in flight"])
    blocks += [
        [
            "line",
            f"cancel scope {scope.scope!r} in force since {scope.occurred_at:%Y-%m-%d %H:%M:%S}"
            f" (by {scope.by}; tickwork cancel --clear {scope.scope})",
        ]
        for scope in status_now.cancel_scopes
    ]
    if status_now.backfills:
        from harness.cli.backfill_command import describe

        for shown in status_now.backfills:
            request = shown.backfill.request
            blocks.append(
                [
                    "line",
                    f"backfill {request.backfill_id} of {request.level} ({shown.backfill.state}, "
                    f"{request.start:%Y-%m-%d %H:%M} to {request.end:%Y-%m-%d %H:%M} UTC): "
                    + describe(shown.progress),
                ]
            )
    if config.executor.kind == "procrastinate":
        blocks.append(_workers_block(store, now))
    return blocks


def _next_slot(level: LevelStatus) -> str:
    """When the level fires next, or why it does not."""
    if level.refused:
        return "refused"
    return f"{level.next_slot:%Y-%m-%d %H:%M:%S}" if level.next_slot else "ended"


def _workers_block(store: SqlEventStore, now: datetime) -> Block:
    """The procrastinate executor's workers: host, concurrency, running, last heartbeat."""
    from harness.execution import workers

    known = workers(store)
    if not known:
        return ["line", "no worker registered (start `tickwork worker` on a host)"]
    headers = ["worker", "host", "pid", "concurrency", "running", "last heartbeat (s ago)"]
    rows = [
        [
            str(worker.worker_id),
            worker.host or "?",
            str(worker.pid or "?"),
            str(worker.concurrency or "?"),
            str(worker.running),
            f"{(now - worker.last_heartbeat).total_seconds():.1f}",
        ]
        for worker in known
    ]
    return ["table", headers, rows]


def _on_a_bad_file(blocks: list[Block], error: Exception) -> list[Block]:
    """The running service's status, told first that the file on disk is bad and why."""
    said = (
        f"{error}\nthe file is not in force: this is the running service's status, on the "
        "configuration it loaded (fix the file and it reloads)"
    )
    if blocks and blocks[0][0] == "json":
        return [["json", {**blocks[0][1], "config_error": str(error)}]]
    return [["line", said], *blocks]


def status_answers(
    served: Settings, config_path: Path, store: SqlEventStore, report: Callable[[str], None]
) -> Companion:
    """The running service's side: `tickwork status` of its configuration, answered here.

    Each answer reads the configuration file anew, as the command would: an edited file
    shows its levels. A broken one does not keep the operator from the status: the
    service answers with what it runs (the configuration it loaded, reloads included)
    and says first that the file is bad and why, naming it as the command was given it
    (the same folder: the socket's name holds it). Only the service's own file is read;
    a file edited to name another store is declined, and the command reads that store
    itself.
    """
    from harness.config import ConfigError, service_socket
    from harness.local_socket import NotServed, serve

    socket = service_socket(config_path)

    def answer(request: Any) -> dict[str, Any] | None:
        if not isinstance(request, dict) or request.get("blocks") != BLOCKS_VERSION:
            return None
        asked = Path(str(request.get("config")))
        if asked.resolve() != config_path.resolve():
            return None
        as_json, verbose = request.get("json") is True, request.get("verbose") is True
        try:
            config = checked_settings(asked)  # its errors name the file as the asker does
        except ConfigError as exc:
            blocks = status_blocks(served, store, as_json, verbose, IN_FORCE)
            return {"blocks": _on_a_bad_file(blocks, exc)}
        if config.store.url != served.store.url:
            return None
        return {"blocks": status_blocks(config, store, as_json, verbose)}

    def run(stopping: threading.Event) -> None:
        try:
            serve(socket, answer, stopping, lambda exc: report(f"status not answered: {exc!r}"))
        except NotServed as exc:
            report(f"`tickwork status` reads the store itself: {exc}")

    return run
