"""Which agent runs a tick, and where tickwork finds the agent CLIs it can run.

`strands` (the default) is the in-process Strands agent; `claude-code` and `opencode` run
their npm CLI as a child of the tick process, under the same caps, ledger and lifecycle.
The CLIs are pinned in `ops/agents/package.json` and its lockfile and installed into
`ops/agents/node_modules` by `npm ci` (never globally), so every host runs the versions
the tests ran; the folder can be moved with `[agents] dir`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from harness.contracts.wire import Api

AgentKind = Literal["strands", "claude-code", "opencode"]
AGENT_KINDS: tuple[AgentKind, ...] = get_args(AgentKind)

DEFAULT_AGENTS_DIR = Path(__file__).resolve().parents[2] / "ops" / "agents"
"""The project's own `ops/agents`, where `npm ci` puts the pinned CLIs."""


@dataclass(frozen=True)
class AgentCli:
    """One agent CLI: its binary (under `node_modules`) and the npm package that ships it."""

    kind: AgentKind
    binary: str
    """The executable's path inside `<agents_dir>/node_modules`."""
    package: str
    apis: tuple[Api, ...]
    """The wire protocols its model traffic can speak (its level's or target's `api`)."""
    companion: str | None = None
    """A folder of `agents_dir` with its own pinned packages the CLI needs installed too
    (`npm ci --prefix <agents_dir>/<companion>`), or None."""
    helpers: tuple[str, ...] = ()
    """Executables (paths inside `node_modules`, pinned beside the CLI) that it would
    otherwise download on each start into the tick's fresh `HOME`."""

    def companion_or_fail(self) -> str:
        """The companion folder's name; only asked of a CLI that has one."""
        if self.companion is None:
            raise ValueError(f"the {self.kind} CLI has no companion packages")
        return self.companion

    def path(self, agents_dir: Path) -> Path:
        """Where `npm ci --prefix <agents_dir>` puts the binary."""
        return agents_dir / "node_modules" / self.binary

    def helper_paths(self, agents_dir: Path) -> list[Path]:
        """Where `npm ci --prefix <agents_dir>` puts the helpers."""
        return [agents_dir / "node_modules" / helper for helper in self.helpers]

    def missing(self, agents_dir: Path) -> str | None:
        """Why the CLI cannot run from `agents_dir`, with the command that installs it."""
        named = [(f"the {self.kind} CLI ({self.package})", self.path(agents_dir))]
        named += [
            (f"the {self.kind} CLI's {path.name}", path) for path in self.helper_paths(agents_dir)
        ]
        for name, binary in named:
            if not (binary.is_file() and binary.stat().st_mode & 0o111):
                return (
                    f"{name} is not installed: no executable {binary}; install the pinned "
                    f"CLIs with `npm ci --prefix {agents_dir}` (or `make`)"
                )
        if self.companion is not None:
            folder = agents_dir / self.companion
            if not (folder / "node_modules").is_dir():
                return (
                    f"the {self.kind} CLI's companion packages are not installed: no "
                    f"{folder / 'node_modules'}; install them with `npm ci --prefix {folder}` "
                    "(or `make`)"
                )
        return None


AGENT_CLIS: dict[AgentKind, AgentCli] = {
    "claude-code": AgentCli(
        "claude-code", ".bin/claude", "@anthropic-ai/claude-code", ("anthropic",)
    ),
    "opencode": AgentCli(
        "opencode",
        "opencode-linux-x64/bin/opencode",
        "opencode-linux-x64",
        ("openai-chat",),
        companion="opencode-config",
        helpers=("@vscode/ripgrep-linux-x64/bin/rg",),
    ),
}
"""The kinds that run a CLI; `strands` runs in the tick process itself.

OpenCode is pinned as its Linux x86-64 binary package, not the `opencode-ai` wrapper: the
wrapper's lockfile names a binary package per platform, and `npm ci` refuses a lockfile
that lacks any of them, which it does wherever the registry serves only some platforms
(as the one this project is built against does). Its grep and glob tools run ripgrep,
which OpenCode looks for on `PATH`, then in its cache folder, and otherwise downloads from
GitHub on every start (a tick's `HOME` is new each time): the tick links the pinned one
into its cache folder, so no tick reaches for the network and its search tools work
offline."""


def missing_agent(kind: AgentKind, agents_dir: Path | None) -> str | None:
    """Why `kind` cannot run here (None: it can; `strands` always can)."""
    cli = AGENT_CLIS.get(kind)
    return None if cli is None else cli.missing(agents_dir or DEFAULT_AGENTS_DIR)


def require_agent_api(kind: AgentKind, api: Api) -> None:
    """Refuse an `api` the agent's CLI cannot speak (a validator's `ValueError`)."""
    cli = AGENT_CLIS.get(kind)
    if cli is not None and api not in cli.apis:
        spoken = ", ".join(cli.apis)
        raise ValueError(f"agent {kind!r} speaks api {spoken}, not {api!r}")
