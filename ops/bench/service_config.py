"""The tickwork.toml a benchmark's `tickwork run` reads: a SQLite store and folders in `root`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def write_config(root: Path, runner: str, tables: str) -> Path:
    """Write the config; `runner` holds `[runner]` lines, `tables` the `[levels.*]` tables."""
    config = root / "tickwork.toml"
    config.write_text(
        f'[store]\nurl = "sqlite:///{root}/events.db"\n[paths]\nresults = "{root}/results"\n'
        f'spool = "{root}/spool"\n[runner]\n{runner}\n\n{tables}'
    )
    return config


def start_service(
    root: Path, config: Path, upstream_url: str, **popen: Any
) -> subprocess.Popen[Any]:
    """`tickwork run` on `config` in `root`, against the upstream.

    None of the caller's TICKWORK_ variables go along: a benchmark must not inherit an
    operator's settings.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    env.update(TICKWORK_CONFIG=str(config), OPENAI_BASE_URL=upstream_url)
    tickwork = str(Path(sys.executable).with_name("tickwork"))
    return subprocess.Popen([tickwork, "run"], env=env, cwd=root, **popen)
