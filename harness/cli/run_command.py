"""`tickwork run`: the scheduler service in the foreground."""

from __future__ import annotations

import signal
from datetime import UTC, datetime

from harness.cli.app import app, out, settings, store_for, upstream_for_ticks
from harness.cli.catalog_commands import router_or_exit
from harness.execution.runner import Runner
from harness.scheduling.service import Service


@app.command("run")
def run_service() -> None:
    """Run the scheduler in the foreground: every level on its schedule (SIGTERM stops it).

    SIGHUP (or an edit of the file) reloads the routing catalog; an invalid one is
    reported and the one in force stays.
    """
    config = settings()
    router = router_or_exit(config, report)
    store = store_for(config)
    try:
        with upstream_for_ticks() as env:
            runner = Runner(config, store, env=env, router=router)
            service = Service(config, store, runner, report)
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: service.stopping.set())
            if router is not None:
                signal.signal(signal.SIGHUP, lambda *_: router.source.request_reload())
                router.source.watch(service.stopping)
            service.serve()
    finally:
        store.close()


def report(line: str) -> None:
    out.print(f"{datetime.now(UTC):%H:%M:%S} {line}", highlight=False, markup=False)
