"""The tick result file: the worker's only channel back to the runner (stdout is never read).

Written atomically (temp file in the same folder, fsync, rename, fsync of the folder) with
mode 0600, so the runner sees either no file or a whole one, and other users see neither.
"""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, NonNegativeInt, ValidationError

from harness.contracts.failures import FailureClass
from harness.contracts.secrets import redact_data
from harness.files import write_atomically


class _Model(BaseModel):
    # Built on first use: the read models import this module for `read_result`, and
    # most commands that load them never read a result file.
    model_config = ConfigDict(extra="forbid", defer_build=True)


class ResultUsage(_Model):
    """What the tick spent, read by the runner for the terminal event and the ledger."""

    prompt_tokens: NonNegativeInt = 0
    completion_tokens: NonNegativeInt = 0
    model_calls: NonNegativeInt = 0
    estimated_calls: NonNegativeInt = 0


class ResultToolCalls(_Model):
    """Tool calls run and cancelled, so the terminal event can report what the cap stopped."""

    executed: NonNegativeInt = 0
    cancelled: NonNegativeInt = 0


class ResultError(_Model):
    """Why a tick failed, classed so the runner knows whether another attempt could help."""

    type: str
    message: str
    failure_class: FailureClass = "internal"
    traceback_tail: str = ""


class TickResult(_Model):
    """The worker's whole answer to the runner: text, usage, tools and any error, versioned."""

    version: Literal[1] = 1
    tick_id: str
    ok: bool
    text: str = ""
    value: JsonValue = None
    """A JSON level's answer, parsed (and valid against its schema); None for text levels."""
    stop_reason: str | None = None
    usage: ResultUsage = ResultUsage()
    tool_calls: ResultToolCalls = ResultToolCalls()
    error: ResultError | None = None
    target: str | None = None
    """The catalog target that gave this outcome (after any fallback), when routed."""
    finished_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


class ResultFileError(Exception):
    """The result file is missing or cannot be used; the message says which and why."""


class ResultMissingError(ResultFileError):
    """No result file at all (the worker died before writing, or it was removed)."""


def write_result(path: Path, result: TickResult) -> None:
    """Every known secret is redacted first: an error message may quote the API key."""
    document = redact_data(result.model_dump(mode="json"))
    write_atomically(path, json.dumps(document, indent=2, ensure_ascii=False).encode())


MAX_RESULT_BYTES = 64 * 1024 * 1024
"""Far above any model answer; a larger file is not read into the runner's memory."""


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file of at most `MAX_RESULT_BYTES`, the link not followed.

    A `can_shell` tick can replace its own result file: with a link to `/dev/zero` or a
    FIFO, reading it as a file would fill the runner's memory or block it for good.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ResultFileError(f"result file {path} is not a regular file")
        if info.st_size > MAX_RESULT_BYTES:
            raise ResultFileError(
                f"result file {path} is larger than {MAX_RESULT_BYTES // 2**20} MiB"
            )
        return file.read(MAX_RESULT_BYTES + 1)


def read_result(path: Path) -> TickResult:
    """Read a tick's result; a missing, unreadable or invalid file raises its own error class."""
    try:
        raw = _read_regular(path)
    except FileNotFoundError:
        raise ResultMissingError(f"result file {path} is missing") from None
    except OSError as exc:
        raise ResultFileError(f"result file {path} cannot be read: {exc.strerror}") from exc
    try:
        return TickResult.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(document)"
        raise ResultFileError(
            f"result file {path} is corrupt: {where}: {first['msg']} ({exc.error_count()} error(s))"
        ) from exc
