"""Claude Code (`@anthropic-ai/claude-code`) as a tick's agent: headless, stream-json.

`claude -p --output-format stream-json --verbose --model M`, the prompt on its stdin
(`-p` reads it there when it is given none in argv), prints one JSON object
per line: `system` (init), `assistant` messages (one line per content block: text,
thinking, tool_use), `user` messages (tool results), and a final `result` with its text,
total usage and stop reason. Its settings come from a file of the tick's own
(`--settings`), so nothing is written into an operator's repository: the `PreToolUse`
hook that asks the tick's tool budget for every call (and whose `allow` is the only
permission a headless run needs), below the `full` tier the rules that keep file tools
in the working folder (`CONFINED`), and no other source (`--setting-sources ""`): neither
the user's nor the project's settings can add hooks, permissions or an API helper.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from harness.contracts import (
    THINKING_BUDGETS,
    AgentKind,
    Api,
    Effort,
    TickPayload,
    claude_tool_args,
)
from workers.agents.base import AgentCliRun, MalformedLineError
from workers.transcript import ToolStatus

SETTINGS_FILE = "tickwork-claude-settings.json"
CONFINED = {
    "blockReadsOutsideWorkingDirectories": True,
    "blockWritesOutsideWorkingDirectories": True,
    "denyInsteadOfPrompting": True,
}
"""Claude Code's own rules for a tier below `full`: file tools stay in the working folder,
and what would be asked is refused (nobody answers a headless tick). The hook checks the
same on its own (`workers.confinement`)."""


def claude_settings(payload: TickPayload, hook_command: str) -> dict[str, Any]:
    """The tick's settings: the hook on every tool; below `full`, the confining rules."""
    hook = {"type": "command", "command": hook_command}
    settings: dict[str, Any] = {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}
    if not payload.capabilities().shell:
        settings["permissions"] = CONFINED
    return settings


class ClaudeCodeRun(AgentCliRun):
    """One tick of Claude Code."""

    kind: ClassVar[AgentKind] = "claude-code"
    api: ClassVar[Api] = "anthropic"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: dict[str, tuple[str, Any]] = {}
        self._instructions: Path | None = None

    @property
    def settings_path(self) -> Any:
        """The tick's own settings file, in its `HOME`."""
        return self.tick.home / SETTINGS_FILE

    def prepare(self) -> None:
        """The hook on every tool, in a settings file of the tick's own; the instructions' file."""
        settings = claude_settings(self.tick.payload, self.tick.hook_command)
        self.settings_path.write_text(json.dumps(settings), encoding="utf-8")
        self._instructions = self.instructions_file()

    def argv(self) -> list[str]:
        """Headless, streaming its events, on the tick's model, with the tick's settings only."""
        payload = self.tick.payload
        argv = [
            str(self.tick.binary),
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--model",
            self.tick.target.model_id,
            "--settings",
            str(self.settings_path),
            "--setting-sources",
            "",
        ]
        if self._instructions is not None:
            argv += ["--append-system-prompt-file", str(self._instructions)]
        # The level's tier: only its tools exist in the session, are allowed without asking.
        return (
            argv
            + claude_tool_args(payload.capabilities()).argv()
            + effort_argv(self.tick.target.effort)
        )

    def env(self) -> dict[str, str]:
        """The tick's governor as its endpoint, the tick's client key, no traffic of its own."""
        return {
            "ANTHROPIC_BASE_URL": self.tick.governor_url,
            "ANTHROPIC_API_KEY": self.tick.client_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            **thinking_env(self.tick.target.effort),
        }

    def read(self, line: dict[str, Any]) -> None:
        """Transcript and tool events from one line; the result line fills the report."""
        kind = line.get("type")
        if not isinstance(kind, str):
            raise MalformedLineError("a line without a `type`")
        if kind == "assistant":
            self._assistant(_content(line))
        elif kind == "user":
            self._tool_results(_content(line))
        elif kind == "result":
            self._result(line)

    def _assistant(self, content: list[Any]) -> None:
        for block in content:
            if not isinstance(block, dict):
                raise MalformedLineError("a content block that is no object")
            if block.get("type") == "text":
                self.transcript.said(str(block.get("text") or ""), "assistant")
            elif block.get("type") == "thinking":
                self.transcript.said(str(block.get("thinking") or ""), "thinking")
            elif block.get("type") == "tool_use":
                self._pending[str(block.get("id"))] = (str(block.get("name")), block.get("input"))

    def _tool_results(self, content: list[Any]) -> None:
        """Each result a finished call; `cancelled` only when the tick's tool budget refused it.

        A call the tier's confinement or the CLI's own rules refused is an error of the
        call, as a Strands tool's refusal is: the budget's count of cancelled calls and
        the story's stay one count.
        """
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            use_id = str(block.get("tool_use_id"))
            name, arguments = self._pending.pop(use_id, ("unknown", None))
            status: ToolStatus = "error" if block.get("is_error") else "ok"
            if use_id in self.tick.refused_tools:
                status = "cancelled"
            output = _text(block.get("content"))
            self.transcript.tool(name, use_id, arguments, output, status, self.tick.tool_ms(use_id))

    def _result(self, line: dict[str, Any]) -> None:
        report = self.report
        report.ended = True
        report.text = str(line.get("result") or "")
        report.stop_reason = line.get("stop_reason") or None
        if line.get("is_error"):
            report.error = report.text or str(line.get("subtype") or "error")
        usage = line.get("usage")
        if isinstance(usage, dict):
            report.prompt_tokens = sum(
                int(usage.get(name) or 0)
                for name in (
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                )
            )
            report.completion_tokens = int(usage.get("output_tokens") or 0)


def effort_argv(effort: Effort | None) -> list[str]:
    """`--effort`, which the CLI sends as `output_config.effort` to the models that take one.

    Effort `none` has no such level: it turns thinking off (`thinking_env`) instead.
    """
    return [] if effort is None or effort == "none" else ["--effort", effort]


def thinking_env(effort: Effort | None) -> dict[str, str]:
    """`MAX_THINKING_TOKENS`: thinking's budget per effort, the same as a Strands tick's.

    0 (effort `none`) turns thinking off; without an effort, the CLI keeps its own default.
    """
    if effort is None:
        return {}
    return {"MAX_THINKING_TOKENS": str(THINKING_BUDGETS.get(effort, 0))}


def _content(line: dict[str, Any]) -> list[Any]:
    message = line.get("message")
    if not isinstance(message, dict):
        raise MalformedLineError(f"a `{line.get('type')}` line without its message")
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MalformedLineError(f"a `{line.get('type')}` message without content blocks")
    return content


def _text(content: Any) -> str:
    """A tool result's content as text: text blocks as they are, anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text"))
            if isinstance(block, dict) and "text" in block
            else json.dumps(block)
            for block in content
        )
    return "" if content is None else json.dumps(content)
