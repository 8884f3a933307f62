"""Capability tiers: which tools a tick may use, whatever agent runs it.

A level says `tools = "none" | "read" | "files" | "full"` (the predecessor's tiers) and
`web = true` to allow web tools on top; `can_shell = true` alone still means `full`.
This module is the one place that turns a tier into each agent's own terms, so the
three kinds cannot drift apart:

- Strands ticks: tool names the worker builds (`strands_tools`);
- OpenCode: its `permission` config, where a denied tool is not even offered to the
  model (`opencode_permissions`);
- Claude Code: `--tools` (the built-in tools that exist at all), `--allowedTools` (run
  without a prompt) and `--disallowedTools` (every other tool it is known to have, in
  case a later version adds one under an old name) (`claude_tool_args`).

Every list is an allow-list: a tool a tier does not name is off, so a CLI version that
adds a tool does not widen a tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

ToolTier = Literal["none", "read", "files", "full"]
TOOL_TIERS: tuple[ToolTier, ...] = get_args(ToolTier)


@dataclass(frozen=True)
class Capabilities:
    """What a tick may do: its tier, and whether web tools are allowed on top of it."""

    tier: ToolTier = "none"
    web: bool = False

    @property
    def reads(self) -> bool:
        """Reads files of its working folder."""
        return self.tier != "none"

    @property
    def writes(self) -> bool:
        """Creates and edits files of its working folder."""
        return self.tier in ("files", "full")

    @property
    def shell(self) -> bool:
        """Runs commands (and, with them, reaches anything its user can)."""
        return self.tier == "full"


def capabilities(
    tools: ToolTier | None, can_shell: bool = False, web: bool = False
) -> Capabilities:
    """A level's capabilities: `tools` when set, else `full` for `can_shell`, else `none`."""
    tier: ToolTier = tools if tools is not None else ("full" if can_shell else "none")
    return Capabilities(tier, web)


# Strands ticks -------------------------------------------------------------------------

STRANDS_READ = ("file_read",)
"""tickwork's own read-only tool (view a file, list a folder), confined to the workdir."""
STRANDS_WRITE = ("file_editor",)
"""Strands' vended file editor (view, create, replace, insert)."""
STRANDS_SHELL = ("shell",)
STRANDS_WEB = ("web_fetch",)


def _by_tier(
    caps: Capabilities,
    read: tuple[str, ...],
    write: tuple[str, ...],
    shell: tuple[str, ...],
    web: tuple[str, ...],
) -> tuple[str, ...]:
    """The names of each ability `caps` has, in the order read, write, shell, web."""
    abilities = ((caps.reads, read), (caps.writes, write), (caps.shell, shell), (caps.web, web))
    return tuple(name for has, names in abilities if has for name in names)


def strands_tools(caps: Capabilities) -> tuple[str, ...]:
    """The names of the tools a Strands tick gets (the worker builds them).

    `full` is what `can_shell` always gave: the shell and the editor (whose `view` reads).
    """
    names: tuple[str, ...] = ()
    if caps.shell:
        names = STRANDS_WRITE + STRANDS_SHELL
    elif caps.reads:
        names = STRANDS_READ + (STRANDS_WRITE if caps.writes else ())
    if caps.web:
        names += STRANDS_WEB
    return names


# OpenCode ------------------------------------------------------------------------------

OPENCODE_READ = ("read", "glob", "grep", "list")
OPENCODE_WRITE = ("edit",)
"""`edit` covers OpenCode's write, edit and patch tools."""
OPENCODE_SHELL = ("bash", "task", "external_directory")
"""With a shell nothing stays inside the working folder, so its file tools need not either;
`task` runs subagents in the same process, their calls counted and booked like the tick's."""
OPENCODE_WEB = ("webfetch", "websearch")
OPENCODE_ALWAYS = ("todowrite", "todoread", "doom_loop")
"""Harmless bookkeeping, and the repeated-call check, which `opencode run` would answer with
a refusal that ends the run: the tick's own tool cap bounds repetition instead."""


def opencode_permissions(caps: Capabilities) -> dict[str, str]:
    """OpenCode's `permission` config: everything denied except what the tier allows."""
    always = OPENCODE_ALWAYS if caps.reads else ("doom_loop",)
    allowed = always + _by_tier(caps, OPENCODE_READ, OPENCODE_WRITE, OPENCODE_SHELL, OPENCODE_WEB)
    return {"*": "deny", **dict.fromkeys(allowed, "allow")}


# Claude Code ---------------------------------------------------------------------------

CLAUDE_READ = ("Read", "Glob", "Grep")
CLAUDE_WRITE = ("Edit", "Write", "NotebookEdit")
CLAUDE_SHELL = ("Bash", "Task", "TaskStop")
CLAUDE_WEB = ("WebFetch", "WebSearch")
CLAUDE_KNOWN = (
    *CLAUDE_READ,
    *CLAUDE_WRITE,
    *CLAUDE_SHELL,
    *CLAUDE_WEB,
    "Agent",
    "CronCreate",
    "CronDelete",
    "CronList",
    "EnterWorktree",
    "ExitWorktree",
    "ListAgents",
    "Monitor",
    "ReportFindings",
    "ScheduleWakeup",
    "SendMessage",
    "Skill",
    "ToolSearch",
    "Workflow",
)
"""The built-in tools of `@anthropic-ai/claude-code` 2.1.332 (its `init` line, plus Glob and
Grep, which it offers only when `--tools` names them)."""


@dataclass(frozen=True)
class ClaudeToolArgs:
    """Claude Code's tool flags for one tier."""

    tools: tuple[str, ...]
    """`--tools`: the built-in tools that exist in the session ("" for none)."""
    allowed: tuple[str, ...]
    """`--allowedTools`: run without asking (headless, nobody could answer)."""
    disallowed: tuple[str, ...]
    """`--disallowedTools`: every other known tool."""

    def argv(self) -> list[str]:
        """The flags as command-line arguments."""
        argv = ["--tools", ",".join(self.tools)]
        if self.allowed:
            argv += ["--allowedTools", ",".join(self.allowed)]
        if self.disallowed:
            argv += ["--disallowedTools", ",".join(self.disallowed)]
        return argv


def claude_tool_args(caps: Capabilities) -> ClaudeToolArgs:
    """Claude Code's `--tools`, `--allowedTools` and `--disallowedTools` for a tier."""
    tools = _by_tier(caps, CLAUDE_READ, CLAUDE_WRITE, CLAUDE_SHELL, CLAUDE_WEB)
    disallowed = tuple(name for name in CLAUDE_KNOWN if name not in tools)
    return ClaudeToolArgs(tools=tools, allowed=tools, disallowed=disallowed)
