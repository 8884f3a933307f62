"""The secret values tickwork knows, and their redaction where text leaves a process.

An upstream that quotes the API key in its error (`Incorrect API key provided: sk-…`, or
a 500 echoing the `Authorization` header) hands the key to every place that keeps or shows
the error. Rather than trusting each of those places, text is redacted where it leaves a
process: the event encoding, the result file writer, digests, API answers and the
process's own stdout/stderr (logs, tracebacks and the terminal go through them).

Secrets come from the environment, so they are known by variable name: the fixed ones
below and the names the configuration and the catalog register (`api_key_env`,
`[digests.*] notify`). Values are read at redaction time, so a registered name whose
value appears later is still covered. One secret may stand in the configuration file: a
password inside `store.url`, redacted as `PGPASSWORD`, the variable ticks get it in.

A value of `MIN_SECRET_CHARS` or more is replaced wherever it stands. A shorter one (a
local server's placeholder key such as `ollama`, or a weak key) is replaced only where
it stands as a word of its own in free text: the process's stdout/stderr (logs, tick
logs, the terminal) and the free-text fields of events and results (`FREE_TEXT`), which
is where an upstream quoting a key puts it. Elsewhere a short value is left alone on
purpose: JSON documents and identifiers (level names, model ids, tick ids, paths) hold
short strings by chance, and replacing those would corrupt stored data (an event whose
`level` or `tick_id` changed no longer folds into its tick) and, worse, show the value
to anyone who sees which part of a known name was taken out. Eight characters is the
floor below which such chance matches inside identifiers become likely.
"""

from __future__ import annotations

import ctypes
import io
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TextIO
from urllib.parse import unquote

API_KEY_ENV = "OPENAI_API_KEY"
ANTHROPIC_API_KEY_ENV = "ANTHROPIC_API_KEY"
API_TOKEN_ENV = "TICKWORK_API_TOKEN"
ALERT_URLS_ENV = "TICKWORK_ALERT_URLS"
STORE_PASSWORD_ENV = "PGPASSWORD"
"""libpq's password variable: a tick's worker gets the store's password only there."""

TELEMETRY_PREFIX = "OTEL_"
"""OpenTelemetry's settings: a tick's worker exports with them, its tools never see them."""
TELEMETRY_HEADERS_ENV: tuple[str, ...] = tuple(
    f"OTEL_EXPORTER_OTLP_{signal}HEADERS" for signal in ("", "TRACES_", "METRICS_", "LOGS_")
)
"""The collector's headers (`key=value,…`, values percent-encoded): they carry its tokens."""

SECRET_ENV: tuple[str, ...] = (
    API_KEY_ENV,
    ANTHROPIC_API_KEY_ENV,
    API_TOKEN_ENV,
    ALERT_URLS_ENV,
    STORE_PASSWORD_ENV,
    *TELEMETRY_HEADERS_ENV,
)
"""Variables that always hold secrets; more are registered by the config and catalog."""

MIN_SECRET_CHARS = 8
"""Values this long are replaced anywhere; shorter ones only as words in free text."""

FREE_TEXT = frozenset(
    {"reason", "stderr_tail", "message", "traceback_tail", "detail", "text", "error"}
)
"""Keys of event, result and answer fields that hold prose, not identifiers."""

_LIST_SEPARATORS = re.compile(r"[\s,]+")
_lock = threading.Lock()
_registered: set[str] = set(SECRET_ENV)
_held: dict[str, str] = {}
"""Secret values no variable of this process's environment holds, by name: taken out of it
(`withhold_environment`) or given another way (a password inside `store.url`)."""


def register_secret_names(names: Iterable[str]) -> None:
    """Add environment variable names whose values must never leave a process."""
    with _lock:
        _registered.update(name for name in names if name)


def secret_names() -> frozenset[str]:
    """Every variable name known to hold a secret in this process."""
    with _lock:
        return frozenset(_registered)


def register_secret_value(name: str, value: str) -> None:
    """Redact `value` as the secret of variable `name`, though no variable holds it here.

    The password inside `store.url` is `PGPASSWORD`'s, the variable ticks get it in.
    """
    with _lock:
        _registered.add(name)
        _held[name] = value


def withhold_environment(prefix: str) -> None:
    """Take every variable named `prefix…` out of this process's environment.

    The processes it starts from then on do not inherit them; the values of the secret
    ones among them stay known, and redacted from what this process writes.
    """
    with _lock:
        for name in [name for name in os.environ if name.startswith(prefix)]:
            value = os.environ.pop(name)
            if name in _registered:
                _held[name] = value


def _parts(name: str, value: str) -> Iterator[str]:
    """The value and each secret it is made of: a list's items, a header list's values."""
    yield value
    yield from _LIST_SEPARATORS.split(value)
    if name in TELEMETRY_HEADERS_ENV:
        for pair in value.split(","):
            header = unquote(pair.partition("=")[2]).strip()
            yield header
            yield from header.split()[1:]  # the credentials of `Bearer <token>`


def secret_values(
    env: Mapping[str, str] | None = None, short: bool = False
) -> list[tuple[str, str]]:
    """(variable, value) of every secret set in `env`, longest value first.

    A variable may hold a list (alert URLs separated by commas or spaces, collector
    headers): each part is a secret of its own, so a message quoting one URL or token is
    caught too. `short`: also values under `MIN_SECRET_CHARS`, down to one character.
    Without `env`: this process's environment and the values it holds apart from it.
    """
    held = _held if env is None else {}
    env = os.environ if env is None else env
    least = 1 if short else MIN_SECRET_CHARS
    found: dict[str, str] = {}
    for name in secret_names():
        for value in (env.get(name) or "", held.get(name) or ""):
            for part in _parts(name, value):
                part = part.strip()
                if len(part) >= least:
                    found.setdefault(part, name)
    return sorted(((name, value) for value, name in found.items()), key=lambda p: -len(p[1]))


def _replace(text: str, secrets: list[tuple[str, str]], words: bool) -> str:
    for name, value in secrets:
        if value not in text:
            continue
        marker = f"[redacted:{name}]"
        if len(value) >= MIN_SECRET_CHARS:
            text = text.replace(value, marker)
        elif words:
            word = rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])"
            text = re.sub(word, marker.replace("\\", r"\\"), text)
    return text


def redact(text: str, env: Mapping[str, str] | None = None, words: bool = False) -> str:
    """`text` with every known secret value replaced by `[redacted:<VARIABLE>]`.

    `words`: `text` is free text, so a short secret standing as a word is replaced too.
    """
    return _replace(text, secret_values(env, short=words), words)


def redact_data(data: Any, env: Mapping[str, str] | None = None) -> Any:
    """A JSON-like value (dicts, lists, strings) with every string redacted.

    Strings under a `FREE_TEXT` key are free text: short secrets are replaced there too.
    """
    secrets = secret_values(env, short=True)
    if not secrets:
        return data

    def walk(value: Any, prose: bool = False) -> Any:
        if isinstance(value, str):
            return _replace(value, secrets, prose)
        if isinstance(value, dict):
            return {walk(key): walk(item, key in FREE_TEXT) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [walk(item, prose) for item in value]
        return value

    return walk(data)


class RedactingStream(io.TextIOBase):
    """A text stream that redacts what it writes into another one."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self.target = target

    def write(self, text: str) -> int:
        """Write the text redacted; the count is of the text given, as callers expect."""
        self.target.write(redact(text, words=True))
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
