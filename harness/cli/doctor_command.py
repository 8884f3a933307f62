"""`tickwork doctor`: what this host can run (today: the agent CLIs and their versions)."""

from __future__ import annotations

import typer

from harness.cli.app import JsonOption, app, out, print_json, print_rows, settings


@app.command()
def doctor(as_json: JsonOption = False) -> None:
    """List the agent CLIs (agent = "claude-code" | "opencode") installed here, and versions.

    Exits 1 when one is missing or not at the version ops/agents/package.json pins.
    """
    from harness.execution import agent_cli_states

    config = settings()
    states = agent_cli_states(config.agents.dir)
    if as_json:
        print_json(
            [
                {
                    "agent": s.kind,
                    "package": s.package,
                    "path": str(s.path),
                    "pinned": s.pinned,
                    "version": s.version,
                    "ok": s.ok,
                    "problem": s.problem,
                }
                for s in states
            ]
        )
    else:
        out.print(f"agent CLIs under {config.agents.dir}")
        print_rows(
            ["agent", "package", "version", "pinned", "status"],
            [
                [s.kind, s.package, s.version or "-", s.pinned or "-", s.problem or "ok"]
                for s in states
            ],
        )
    if not all(s.ok for s in states):
        raise typer.Exit(1)
