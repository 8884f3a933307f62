"""The `tickwork` command line (Typer + Rich); one module per group of commands."""

from __future__ import annotations

import sys

from harness.cli import (
    api_commands,
    archive_command,
    backfill_command,
    budget_commands,
    catalog_commands,
    digest_commands,
    doctor_command,
    governor_commands,
    levels_command,
    reconcile_command,
    run_command,
    show_command,
    status_command,
    store_commands,
    tick_commands,
    ticks_command,
    worker_command,
)
from harness.cli.app import app, for_arguments

__all__ = [
    "api_commands",
    "app",
    "archive_command",
    "backfill_command",
    "budget_commands",
    "catalog_commands",
    "digest_commands",
    "doctor_command",
    "governor_commands",
    "levels_command",
    "main",
    "reconcile_command",
    "run_command",
    "show_command",
    "status_command",
    "store_commands",
    "tick_commands",
    "ticks_command",
    "worker_command",
]


def main() -> None:
    """The `tickwork` console script: one entry point, so every command shares the app.

    What `app()` does with pretty exceptions off, the parameters' coercion made late
    (`coerce_on_value`) between building the command and running it.
    """
    from typer.main import get_command

    from harness.cli.coercion import coerce_on_value
    from harness.collector import pace_collector

    pace_collector()  # before a command's own imports: a service's start is most of them

    command = get_command(for_arguments(sys.argv[1:]))
    coerce_on_value(command)
    command()
