"""A Strands tick's tools for its capability tier (`harness.contracts.tiers`).

`read` gets `file_read` (a file's lines, or a folder's entries) and `files` adds Strands'
file editor, both confined to the tick's working folder: a path that leaves it, by `..`
or a symbolic link, is refused. `full` is what `can_shell` has always given, a shell and
the editor on the whole machine (a shell reaches anything its user can, so confining the
editor would protect nothing). `web` adds a plain web fetch (the page's text, capped; Strands' own
needs extras tickwork does not install, and its default mode makes model calls of its own).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
from strands import tool
from strands.sandbox.not_a_sandbox_local_environment import NotASandboxLocalEnvironment

from harness.contracts import Capabilities, strands_tools
from workers.confinement import inside

MAX_READ_CHARS = 100_000
"""What `file_read` returns of one file at most; the rest is cut with a note."""
MAX_WEB_BYTES = 2_000_000
MAX_WEB_CHARS = 50_000
WEB_TIMEOUT_SECONDS = 20.0


class FolderSandbox(NotASandboxLocalEnvironment):
    """The host's files, but only those under `root`; read-only unless `writable`."""

    def __init__(self, root: Path, writable: bool) -> None:
        super().__init__()
        self.root = root.resolve()
        self.writable = writable

    def inside(self, path: str) -> Path:
        """`path` (relative to the root, or absolute) resolved, if it stays under the root."""
        return inside(self.root, path)

    def _resolve_path(self, path: str) -> Path:  # type: ignore[override]
        return self.inside(path)

    async def write_file(self, path: str, content: bytes, **kwargs: Any) -> None:
        """Write under the root, when this tier may write."""
        if not self.writable:
            raise PermissionError("this tick's tier reads files; it may not write them")
        await super().write_file(path, content, **kwargs)

    async def remove_file(self, path: str, **kwargs: Any) -> None:
        """Remove under the root, when this tier may write."""
        if not self.writable:
            raise PermissionError("this tick's tier reads files; it may not remove them")
        await super().remove_file(path, **kwargs)


def make_file_read(sandbox: FolderSandbox) -> Any:
    """The read-only file tool of the `read` and `files` tiers."""

    @tool(name="file_read")
    def file_read(path: str, start_line: int = 1, end_line: int = -1) -> str:
        """Read a file of the working folder (its lines, numbered) or list a folder.

        Args:
            path: The file or folder, relative to the working folder (or absolute inside it).
            start_line: The first line to show (1-based).
            end_line: The last line to show (-1: to the end).
        """
        target = sandbox.inside(path)
        if target.is_dir():
            entries = sorted(os.scandir(target), key=lambda entry: entry.name)
            return "\n".join(e.name + ("/" if e.is_dir() else "") for e in entries) or "(empty)"
        lines = target.read_text(encoding="utf-8", errors="replace").split("\n")
        last = len(lines) if end_line == -1 else min(end_line, len(lines))
        first = max(start_line, 1)
        shown = "\n".join(f"{n}: {lines[n - 1]}" for n in range(first, last + 1))
        if len(shown) > MAX_READ_CHARS:
            shown = shown[:MAX_READ_CHARS] + "\n[cut: ask for fewer lines]"
        return shown

    return file_read


def tier_tools(caps: Capabilities, workdir: Path) -> list[Any]:
    """The tools of a Strands tick of `caps`, working in `workdir`."""
    names = strands_tools(caps)
    tools: list[Any] = []
    if "file_read" in names:
        workdir.mkdir(parents=True, exist_ok=True)
    sandbox = FolderSandbox(workdir, writable=caps.writes)
    if "file_read" in names:
        tools.append(make_file_read(sandbox))
    if "shell" in names:
        tools += [vended("shell").shell, vended("file_editor").file_editor]
    elif "file_editor" in names:
        tools.append(vended("file_editor").make_file_editor(sandbox=sandbox))
    if "web_fetch" in names:
        tools.append(web_fetch)
    return tools


VENDED_TOOLS = "strands.vended_tools"


def vended(name: str) -> ModuleType:
    """Strands' vended tool `name` (`strands.vended_tools.<name>`), without its siblings.

    The package's `__init__` imports every tool Strands vends, the MCP router among them
    and with it the whole `mcp` SDK, which tickwork never uses: 284 modules and 0.8 s of
    CPU (December 2026, this machine) in every cold tick of the `files` and `full` tiers
    and in every fork server preloading them, for two tools of a few modules. Until the
    package has been imported, it stands in `sys.modules` for this import only, as the
    folder its submodules are found in; a later `import strands.vended_tools` runs its
    `__init__` as usual and finds this submodule loaded. A thread importing the package in
    that moment would find the folder alone: a tick builds its tools before its agent runs.
    A tick forked from a server that loaded the tool finds it in `sys.modules`.
    """
    module = f"{VENDED_TOOLS}.{name}"
    if module in sys.modules or VENDED_TOOLS in sys.modules:
        return importlib.import_module(module)
    spec = importlib.util.find_spec(VENDED_TOOLS)
    if spec is None:
        raise ImportError(f"no {VENDED_TOOLS} in this Strands", name=VENDED_TOOLS)
    sys.modules[VENDED_TOOLS] = importlib.util.module_from_spec(spec)
    try:
        return importlib.import_module(module)
    finally:
        del sys.modules[VENDED_TOOLS]


@tool(name="web_fetch")
def web_fetch(url: str) -> str:
    """Fetch a web page (http or https) and return its text, cut at 50,000 characters.

    Args:
        url: The page's address.
    """
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"only http and https addresses can be fetched, not {url!r}")
    chunks: list[bytes] = []
    size = 0
    with httpx.stream("GET", url, timeout=WEB_TIMEOUT_SECONDS, follow_redirects=True) as answer:
        for chunk in answer.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_WEB_BYTES:
                break
        status = answer.status_code
    text = b"".join(chunks).decode("utf-8", errors="replace")[:MAX_WEB_CHARS]
    return f"HTTP {status}\n{text}"
