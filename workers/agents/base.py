"""What an agent CLI module implements, and what the frame hands it for one tick.

One module per CLI (`claude_code`, `opencode`) subclasses `AgentCliRun`: it writes its
configuration into the tick's folders (`prepare`), says how the CLI is started (`argv`,
`env`), and turns each JSON line the CLI prints into the tick's transcript and tool
events (`read`), keeping what the CLI reported at its end in `report`. Everything else
(the folders, the tick's governor, the hook, the child process, failures, the result)
is the frame's (`workers.agents.frame`), the same for every CLI.

Neither the prompt nor the instructions go in argv, where one argument longer than the
kernel's limit (128 KiB) fails the start with E2BIG: the frame hands the prompt to the
CLI on its stdin, and a CLI takes the instructions from a file (`instructions_file`).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from harness.contracts import AgentKind, Api, TickPayload
from workers.model import Target
from workers.recorder import EventRecorder
from workers.transcript import Transcript

INSTRUCTIONS_FILE = "tickwork-instructions.md"


class MalformedLineError(Exception):
    """The CLI printed a line that is no event of its format."""


@dataclass(frozen=True)
class CliTick:
    """One tick as a CLI module sees it: where it runs, what it calls, how it asks."""

    payload: TickPayload
    target: Target
    binary: Path
    home: Path
    """The CLI's own `HOME` (sessions, caches, settings), fresh for this tick."""
    workdir: Path
    governor_url: str
    """The tick's governor (`http://127.0.0.1:<port>`): the CLI's model endpoint."""
    hook_command: str
    """A shell command line that answers a `PreToolUse` hook from the tick's tool budget."""
    hook_url: str
    """Where the tool budget is asked directly (POST the call, with `hook_token`)."""
    hook_token: str
    """The `x-tickwork-hook-token` that asker must show: nobody else may spend the budget."""
    client_key: str
    """The API key the CLI is given, good for the tick's governor only; the governor puts
    the real one on each call it forwards."""
    refused_tools: set[str]
    """Tool use ids the tool budget refused (filled by the governor as the hook asks)."""
    tools_asked_at: dict[str, float]
    """Tool use id -> when its hook asked (`time.monotonic`): a tool call's start."""

    def tool_ms(self, tool_use_id: str) -> float:
        """Milliseconds since the call's hook asked (0 when it never did)."""
        asked = self.tools_asked_at.get(tool_use_id)
        return 0.0 if asked is None else round((time.monotonic() - asked) * 1000, 3)


@dataclass
class CliReport:
    """What the CLI said of its own run, from its final line(s)."""

    text: str = ""
    ended: bool = False
    """Its final line (result, last step) was seen."""
    stop_reason: str | None = None
    prompt_tokens: int | None = None
    """The CLI's own count, cache included, to cross-check against the ledger."""
    completion_tokens: int | None = None
    error: str | None = None
    """The CLI's own report of a failed run."""


class CliTranscript(Transcript):
    """The tick's transcript and `ToolCalled` events, fed from a CLI's event lines.

    `stopped` tells whether the tick's governor has answered in the model's place (cap,
    budget, hard ceiling): the answer the CLI then prints is that stop text, recorded as
    `stopped` as a Strands tick's is.
    """

    def __init__(
        self, payload: TickPayload, recorder: EventRecorder, stopped: Callable[[], bool]
    ) -> None:
        super().__init__(payload, recorder)
        self.stopped = stopped

    def said(self, text: str, kind: Literal["assistant", "thinking"]) -> None:
        """An answer (or its thinking) of the model, or the governor's stop in its place."""
        if text:
            self._record("stopped" if kind == "assistant" and self.stopped() else kind, text)


class AgentCliRun(ABC):
    """One CLI's way of running a tick; the frame calls prepare, argv, env, then read per line."""

    kind: ClassVar[AgentKind]
    api: ClassVar[Api]
    """The wire protocol its model traffic speaks (the tick's target must be of it)."""

    def __init__(self, tick: CliTick, transcript: CliTranscript) -> None:
        self.tick = tick
        self.transcript = transcript
        self.report = CliReport()

    def instructions_file(self) -> Path | None:
        """The level's instructions written to a file in the CLI's `HOME` (None: it has none)."""
        instructions = self.tick.payload.instructions
        if not instructions:
            return None
        path = self.tick.home / INSTRUCTIONS_FILE
        path.write_text(instructions, encoding="utf-8")
        return path

    @abstractmethod
    def prepare(self) -> None:
        """Write the CLI's settings (model endpoint, hook, permissions) into home/workdir."""

    @abstractmethod
    def argv(self) -> list[str]:
        """The command line, the binary first; the prompt comes on stdin, never here."""

    @abstractmethod
    def env(self) -> dict[str, str]:
        """Variables of its own on top of the minimal environment (`HOME` is set)."""

    @abstractmethod
    def read(self, line: dict[str, Any]) -> None:
        """One event line, parsed; raises MalformedLineError when it is none of the CLI's."""
