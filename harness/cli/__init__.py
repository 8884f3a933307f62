"""The `tickwork` command line (Typer + Rich); one module per group of commands."""

from __future__ import annotations

from harness.cli import store_commands, tick_commands
from harness.cli.app import app

__all__ = ["app", "main", "store_commands", "tick_commands"]


def main() -> None:
    app()
