"""A tier below `full` keeps file tools in the tick's working folder, whatever agent runs them.

One check for every kind: a Strands tick's own tools resolve each path with `inside`
(`tier_tools.FolderSandbox`), and an agent CLI's `PreToolUse` hook asks `escapes` of
every call before it runs (`tick_governor.TickGovernor.admit_tool`), on top of the CLI's
own permission rules. A path is resolved against the working folder, `..` and symbolic
links followed, and must stay under it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PATH_FIELDS = ("file_path", "filePath", "notebook_path", "path")
"""Where Claude Code's (`file_path`, `notebook_path`, `path`) and OpenCode's (`filePath`,
`path`) file tools take a file or folder."""
GLOB_TOOLS = frozenset({"Glob", "glob"})
"""Tools whose `pattern` is a path pattern (Grep's is a regular expression over contents)."""
WILDCARD = re.compile(r"[*?\[{]")


class OutsideFolderError(PermissionError):
    """A path that resolves outside the tick's working folder."""


def inside(root: Path, path: str) -> Path:
    """`path` (relative to `root`, or absolute) resolved, if it stays under `root`."""
    base = root.resolve()
    resolved = (base / path).resolve()
    if resolved != base and base not in resolved.parents:
        raise OutsideFolderError(f"{path} is outside the tick's working folder {base}")
    return resolved


def escapes(tool: str, tool_input: Mapping[str, Any], root: Path) -> str | None:
    """Why a file tool's call leaves `root` (None: each path it names stays inside)."""
    paths = [value for name in PATH_FIELDS if isinstance(value := tool_input.get(name), str)]
    pattern = tool_input.get("pattern")
    if tool in GLOB_TOOLS and isinstance(pattern, str):
        # The pattern's fixed part, up to its first wildcard, is where the search starts.
        paths.append(pattern[: match.start()] if (match := WILDCARD.search(pattern)) else pattern)
    for path in paths:
        try:
            inside(root, path or ".")
        except OutsideFolderError as exc:
            return f"Not run: {exc}; this tick's tier keeps file tools inside it."
    return None
