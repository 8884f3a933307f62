"""Which agent CLIs this host can run, at which versions (`tickwork doctor`).

Each CLI is asked its version (`<binary> --version`) with a throwaway `HOME`, so the
answer neither reads nor writes the operator's settings; the pinned version is read
from the manifest beside it (`package.json`), and a difference is reported.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.contracts import AGENT_CLIS, AgentKind

VERSION_TIMEOUT_SECONDS = 30.0
VERSION = re.compile(r"\d+\.\d+\.\d+\S*")


@dataclass(frozen=True)
class AgentCliState:
    """One agent CLI as installed here: where, which version, what is wrong with it."""

    kind: AgentKind
    package: str
    path: Path
    pinned: str | None
    version: str | None
    problem: str | None

    @property
    def ok(self) -> bool:
        """Installed, answering, and at the pinned version."""
        return self.problem is None


def pinned_versions(agents_dir: Path) -> dict[str, str]:
    """Package -> version, as the manifest pins them (empty when it cannot be read)."""
    try:
        manifest = json.loads((agents_dir / "package.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    dependencies = manifest.get("dependencies") if isinstance(manifest, dict) else None
    return {str(k): str(v) for k, v in (dependencies or {}).items()}


def agent_cli_states(agents_dir: Path) -> list[AgentCliState]:
    """Every agent CLI tickwork knows, as found under `agents_dir`."""
    pinned = pinned_versions(agents_dir)
    states = []
    for kind, cli in AGENT_CLIS.items():
        path, want = cli.path(agents_dir), pinned.get(cli.package)
        version, problem = None, cli.missing(agents_dir)
        if problem is None:
            version, problem = _version(path)
        if problem is None and want is not None and version != want:
            problem = (
                f"version {version}, the manifest pins {want}: run `npm ci --prefix {agents_dir}`"
            )
        states.append(AgentCliState(kind, cli.package, path, want, version, problem))
    return states


def _version(binary: Path) -> tuple[str | None, str | None]:
    with tempfile.TemporaryDirectory(prefix="tickwork-doctor-") as home:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home}
        try:
            answer = subprocess.run(
                [str(binary), "--version"],
                capture_output=True,
                env=env,
                timeout=VERSION_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return None, f"{binary} --version failed: {exc}"
    found = VERSION.search(answer.stdout.decode(errors="replace"))
    if answer.returncode != 0 or found is None:
        return None, f"{binary} --version exited {answer.returncode} without a version"
    return found.group(0), None
