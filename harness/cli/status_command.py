"""`tickwork status`: the store, levels, ticks in flight and today's spend at a glance.

What it prints is built as plain blocks (`status_blocks`) and drawn by `print_blocks`; a
running service of the same configuration answers it (`harness.cli.answered`).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli.app import (
    JsonOption,
    app,
    out,
    print_json,
    print_rows,
)

if TYPE_CHECKING:
    from harness.config import Settings
    from harness.scheduling import LevelStatus
    from harness.store import SqlEventStore

Block = list[Any]
"""One thing printed, as plain data: `["pairs", rows]` (a borderless two-column
table), `["line", text]`, `["grid", headers, rows]` (`print_rows`), `["table", headers,
rows]` (a Rich table) or `["json", data]` (`--json`)."""

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
    from harness.cli.answered import answer_or_read

    answer_or_read("status", {"as_json": as_json, "verbose": verbose}, needed=True)


def print_status(
    config: Settings,
    store: SqlEventStore,
    as_json: bool,
    verbose: bool,
    bad_file: str | None = None,
) -> None:
    """The status of `config`'s store; `bad_file`: why the file on disk is not in force.

    Only a running service answers on a bad file (`harness.cli.answered`): with what it
    runs, said first to be the configuration it loaded.
    """
    if bad_file is None:
        print_blocks(status_blocks(config, store, as_json, verbose))
        return
    blocks = status_blocks(config, store, as_json, verbose, IN_FORCE)
    print_blocks(_on_a_bad_file(blocks, bad_file))


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


def _on_a_bad_file(blocks: list[Block], error: str) -> list[Block]:
    """The running service's status, told first that the file on disk is bad and why."""
    said = (
        f"{error}\nthe file is not in force: this is the running service's status, on the "
        "configuration it loaded (fix the file and it reloads)"
    )
    if blocks and blocks[0][0] == "json":
        return [["json", {**blocks[0][1], "config_error": error}]]
    return [["line", said], *blocks]
