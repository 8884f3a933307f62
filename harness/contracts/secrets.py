"""The secret values tickwork knows, and their redaction where text leaves a process.

An upstream that quotes the API key in its error (`Incorrect API key provided: sk-…`, or
a 500 echoing the `Authorization` header) hands the key to every place that keeps or shows
the error. Rather than trusting each of those places, text is redacted where it leaves a
process: the event encoding, the result file writer, digests, API answers and the
process's own stdout/stderr (logs, tracebacks and the terminal go through them).

Secrets come from the environment only, so they are known by variable name: the fixed
ones below and the names the configuration and the catalog register (`api_key_env`,
`[digests.*] notify`). Values are read at redaction time, so a registered name whose
value appears later is still covered. A value shorter than `MIN_SECRET_CHARS` is not
treated as a secret: replacing a short word everywhere would garble text and protect
nothing.
"""

from __future__ import annotations

import ctypes
import io
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from typing import Any, TextIO

API_KEY_ENV = "OPENAI_API_KEY"
API_TOKEN_ENV = "TICKWORK_API_TOKEN"
ALERT_URLS_ENV = "TICKWORK_ALERT_URLS"
STORE_PASSWORD_ENV = "PGPASSWORD"
"""libpq's password variable: a tick's worker gets the store's password only there."""

SECRET_ENV: tuple[str, ...] = (API_KEY_ENV, API_TOKEN_ENV, ALERT_URLS_ENV, STORE_PASSWORD_ENV)
"""Variables that always hold secrets; more are registered by the config and catalog."""

MIN_SECRET_CHARS = 8

_LIST_SEPARATORS = re.compile(r"[\s,]+")
_lock = threading.Lock()
_registered: set[str] = set(SECRET_ENV)


def register_secret_names(names: Iterable[str]) -> None:
    """Add environment variable names whose values must never leave a process."""
    with _lock:
        _registered.update(name for name in names if name)


def secret_names() -> frozenset[str]:
    """Every variable name known to hold a secret in this process."""
    with _lock:
        return frozenset(_registered)


def secret_values(env: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(variable, value) of every secret set in `env`, longest value first.

    A variable may hold a list (alert URLs separated by commas or spaces): each part is a
    secret of its own, so a message quoting one URL is caught too.
    """
    env = os.environ if env is None else env
    found: dict[str, str] = {}
    for name in secret_names():
        value = env.get(name) or ""
        for part in (value, *_LIST_SEPARATORS.split(value)):
            part = part.strip()
            if len(part) >= MIN_SECRET_CHARS:
                found.setdefault(part, name)
    return sorted(((name, value) for value, name in found.items()), key=lambda p: -len(p[1]))


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with every known secret value replaced by `[redacted:<VARIABLE>]`."""
    for name, value in secret_values(env):
        if value in text:
            text = text.replace(value, f"[redacted:{name}]")
    return text


def redact_data(data: Any, env: Mapping[str, str] | None = None) -> Any:
    """A JSON-like value (dicts, lists, strings) with every string redacted."""
    secrets = secret_values(env)
    if not secrets:
        return data

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            for name, secret in secrets:
                if secret in value:
                    value = value.replace(secret, f"[redacted:{name}]")
            return value
        if isinstance(value, dict):
            return {walk(key): walk(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [walk(item) for item in value]
        return value

    return walk(data)


class RedactingStream(io.TextIOBase):
    """A text stream that redacts what it writes into another one."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self.target = target

    def write(self, text: str) -> int:
        """Write the text redacted; the count is of the text given, as callers expect."""
        self.target.write(redact(text))
        return len(text)

    def flush(self) -> None:
        """Flush the stream underneath."""
        self.target.flush()

    def isatty(self) -> bool:
        """As the stream underneath: Rich and logging ask it to choose colours."""
        return self.target.isatty()

    def fileno(self) -> int:
        """The descriptor underneath, for code that writes to it directly (subprocesses)."""
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The encoding of the stream underneath."""
        return self.target.encoding


def redact_standard_streams() -> None:
    """Redact all this process writes to stdout and stderr (logs, tracebacks, terminal).

    Calling it again changes nothing.
    """
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr)


PR_SET_DUMPABLE = 4
"""prctl(2) option; 0 makes /proc/<pid>/environ (and mem, maps) readable by root alone."""


def keep_environment_private() -> bool:
    """Make this process's environment unreadable to other processes of the same user.

    A `can_shell` tick runs as the user of the service that started it, so it could read
    the service's secrets from `/proc/<service pid>/environ`. Linux lets another process
    of the same user read it only while this process is "dumpable"; clearing that flag
    also turns off its core dumps and debugger attachment by that user (root still can,
    so the service should not run as root). Processes it starts with `exec` are dumpable
    again, so ticks and their shells are unaffected. False where prctl is not available.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
