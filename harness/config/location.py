"""Where the configuration is, and where the service running it answers.

The standard library alone: `tickwork status` asks a running service before it would
load anything.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from harness.contracts import SECRET_ENV

CONFIG_ENV = "TICKWORK_CONFIG"
CONFIG_FILENAME = "tickwork.toml"
ENV_PREFIX = "TICKWORK_"
"""Environment variables that override the file's settings start with this."""


def config_path(explicit: Path | None = None) -> Path | None:
    """The file to read: the explicit one, `$TICKWORK_CONFIG`, or `./tickwork.toml` if present."""
    if explicit is not None:
        return explicit
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    default = Path(CONFIG_FILENAME)
    return default if default.exists() else None


def service_socket(config_file: Path) -> Path:
    """The socket where a service started with this file, here, in this environment answers.

    Named after everything the settings are read from: the file's absolute path, the
    working directory (relative paths and SQLite URLs resolve against it) and the
    `TICKWORK_*` overrides. A command that would read other settings finds no socket and
    works alone. The secrets among the variables (the API token, the alert URLs) shape
    no setting `status` shows and stay out, so a shell without the service's secrets
    still finds it; the rest go in as a digest, never as values.
    """
    overrides = sorted(
        (name, value)
        for name, value in os.environ.items()
        if name.startswith(ENV_PREFIX) and name != CONFIG_ENV and name not in SECRET_ENV
    )
    inputs = [str(config_file.resolve()), os.getcwd(), overrides]
    digest = hashlib.sha256(json.dumps(inputs).encode()).hexdigest()[:32]
    runtime = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    return Path(runtime) / f"tickwork-{os.getuid()}" / f"{digest}.sock"
