"""`tickwork doctor`: what can be wrong with this host's tickwork, and what to do about it."""

from __future__ import annotations

import typer

from harness.cli.app import JsonOption, app, out, print_json, print_rows, settings


@app.command()
def doctor(as_json: JsonOption = False) -> None:
    """Check the store, a scheduler, the upstreams, the serve port and the agent CLIs.

    The store reachable at this tickwork's schema, a scheduler's recent heartbeat, each
    upstream in use answering with its key set (never shown), the serve port free or
    tickwork's own, the agent CLIs at the versions ops/agents pins. Changes nothing.

    Exits 1 when a check fails, each failure with what to do.
    """
    from harness.cli.doctor_checks import (
        agent_checks,
        port_check,
        scheduler_check,
        store_check,
        upstream_checks,
    )

    config = settings()
    stored, store = store_check(config)
    try:
        checks = [
            stored,
            scheduler_check(store),
            *upstream_checks(config, store),
            port_check(config),
            *agent_checks(config),
        ]
    finally:
        if store is not None:
            store.close()
    failed = [check for check in checks if not check.ok]
    if as_json:
        print_json(
            {
                "ok": not failed,
                "checks": [
                    {"check": c.name, "ok": c.ok, "found": c.found, "fix": c.fix} for c in checks
                ],
            }
        )
    else:
        print_rows(
            ["check", "status", "found"],
            [[c.name, "ok" if c.ok else "FAIL", c.found] for c in checks],
        )
        if failed:
            out.print(f"{len(failed)} check(s) failed; what to do:")
            for check in failed:
                out.print(f"  {check.name}: {check.fix}")
        else:
            out.print("all checks passed")
    if failed:
        raise typer.Exit(1)
