"""`tickwork run`: the scheduler service in the foreground, wired to its executor."""

from __future__ import annotations

import signal
from datetime import UTC, datetime

from harness.cli.app import app, out, settings, store_for, upstream_for_ticks
from harness.cli.catalog_commands import router_or_exit


@app.command("run")
def run_service() -> None:
    """Run the scheduler in the foreground: every level on its schedule (SIGTERM stops it).

    SIGHUP (or an edit of the file) reloads the routing catalog; an invalid one is
    reported and the one in force stays.
    """
    from harness.digests.publish import DigestScheduler, Publisher
    from harness.execution.executors import LocalExecutor
    from harness.execution.prepare import Preparer
    from harness.execution.runner import Runner
    from harness.prices import PriceBook
    from harness.projections import projector_for
    from harness.scheduling.service import Companion, Service

    config = settings()
    router = router_or_exit(config, report)
    store = store_for(config)
    try:
        with upstream_for_ticks() as env:
            preparer = Preparer(config, store, env=env, router=router)
            executor = LocalExecutor(config, preparer, Runner(config, store, env=env), report)
            companions: list[Companion] = []
            if config.digests:
                # A projector of its own: the digest thread folds while the service fires.
                prices = PriceBook(config.prices)
                publisher = Publisher(config, store, projector_for(store, prices), prices, report)
                companions.append(DigestScheduler(config, publisher, report).run)
            service = Service(config, store, executor, report, router, companions)
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, lambda *_: service.stopping.set())
            if router is not None:
                signal.signal(signal.SIGHUP, lambda *_: router.source.request_reload())
                router.source.watch(service.stopping)
            service.serve()
    finally:
        store.close()


def report(line: str) -> None:
    """A service line for the foreground log: timestamped, printed as is (no Rich markup)."""
    out.print(f"{datetime.now(UTC):%H:%M:%S} {line}", highlight=False, markup=False)
