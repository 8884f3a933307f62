"""Ticks run by an agent CLI (Claude Code, OpenCode) instead of the in-process Strands agent.

`run_agent_tick` is the frame (`frame`): the tick's folders, its own governor for the
CLI's model traffic (`tick_governor`), the tool budget's `PreToolUse` hook
(`pretool_hook`), the CLI as a child of the tick (`child`). One module per CLI
implements `base.AgentCliRun`: `claude_code`.
"""

from workers.agents.base import AgentCliRun, CliReport, CliTick, CliTranscript, MalformedLineError
from workers.agents.frame import MODULES, load, run_agent_tick

__all__ = [
    "MODULES",
    "AgentCliRun",
    "CliReport",
    "CliTick",
    "CliTranscript",
    "MalformedLineError",
    "load",
    "run_agent_tick",
]
