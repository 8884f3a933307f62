"""`tickwork worker`: runs tick jobs of the procrastinate executor, on any host.

The loop itself (procrastinate's worker, the control follower, the sweeper of stalled
workers, the signals) is `harness.execution.executors.procrastinate.WorkerLoop`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from harness.cli.app import app, fail, router_or_exit, settings, store_for, upstream_for_ticks
from harness.cli.run_command import report
from harness.cli.thread_crashes import ThreadCrashes


@app.command("worker")
def worker(
    concurrency: Annotated[
        int, typer.Option(min=1, help="Ticks this worker runs at once (its share of the cap).")
    ] = 4,
    queues: Annotated[
        list[str] | None, typer.Option("--queues", help="Queues to take jobs from.")
    ] = None,
) -> None:
    """Run tick jobs of the procrastinate executor until SIGTERM (any number, any host)."""
    from harness.execution import WorkerLoop, places_needed
    from harness.store import Heartbeat, worker_connections

    config = settings(needed=True)
    if config.executor.kind != "procrastinate":
        raise fail('tickwork worker needs [executor] kind = "procrastinate" (a PostgreSQL store)')
    wide = [
        f"levels.{name} needs {places_needed(level)}"
        for name, level in config.levels.items()
        if places_needed(level) > concurrency
    ]
    if wide:
        raise fail(
            f"--concurrency {concurrency} is too few places for a tick of {', '.join(wide)} "
            "(each panel member and each hedge twin takes one)"
        )
    router = router_or_exit(config, report)
    crashes = ThreadCrashes(report)
    crashes.install()
    store = store_for(config, worker_connections(config, concurrency))
    try:
        with (
            upstream_for_ticks(store) as upstream,
            Heartbeat(store, "worker").beating(
                lambda exc: report(f"heartbeat not recorded: {exc}")
            ),
        ):
            WorkerLoop(config, store, upstream.env, router, report, concurrency, queues).run()
    finally:
        store.close()
    if crashes.happened.is_set():
        raise typer.Exit(1)
