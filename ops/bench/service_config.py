"""The tickwork.toml a benchmark's `tickwork run` reads: a SQLite store and folders in `root`."""

from __future__ import annotations

from pathlib import Path


def write_config(root: Path, runner: str, tables: str) -> Path:
    """Write the config; `runner` holds `[runner]` lines, `tables` the `[levels.*]` tables."""
    config = root / "tickwork.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{root}/events.db"\n[paths]\nresults = "{root}/results"\n'
        f'spool = "{root}/spool"\n[runner]\n{runner}\n\n{tables}'
    )
    return config
