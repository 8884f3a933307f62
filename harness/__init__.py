"""tickwork: runs LLM agents on a schedule, with hard caps and a spend ledger of events.

The packages follow a tick's data path, and each may import only what stands before it::

    timespec, files, fronts  small utilities, no tickwork imports
    collector                the cyclic garbage collector's pace in tickwork's processes
    local_socket             one JSON question to a running service, on a Unix socket
    contracts                events, tick payload, result file: plain data
    config, prices, rag      tickwork.toml, prices per call, the retrieval index
    folds                    a range of the log folded in a worker process (lean imports)
    store                    the event store contract and its SQL (the only SQL on events)
    projections              read models folded out of the log, each with its own queries
    routing                  the catalog and its decisions
    governor                 context-size guard: estimate, calibration, policy, proxy
    workers                  inside a tick process: the Strands agent and its hooks
    scheduling               triggers, timetable, wave decisions and claims, budgets,
                             control, reconciliation, the service
    execution                queue, executors, payload preparation, runner, launchers
    digests                  what a period looked like, rendered and published
    devtools                 the fake upstream, the example configuration
    api                      HTTP API, metrics, dashboard
    cli                      the `tickwork` command

`LAYERS` is that order; `tests/test_layering.py` reads every import (module level or
inside a function) and fails when one reaches a later layer, so a cycle between stages
cannot creep in, or when one reaches past another part's front into its submodules:
those are private to their part, which can move, split or rename them without an edit
anywhere else. A front loads its names on first use (`harness.fronts`), so importing
through it costs no more than importing the submodule.
"""

__version__ = "0.1.0"

LAYERS: tuple[str, ...] = (
    "harness.timespec",
    "harness.files",
    "harness.interruptible",
    "harness.collector",
    "harness.fronts",
    "harness.local_socket",
    "harness.contracts",
    "harness.config",
    "harness.prices",
    "harness.rag",
    "harness.folds",
    "harness.store",
    "harness.projections",
    "harness.routing",
    "harness.governor",
    "workers",
    "harness.scheduling",
    "harness.execution",
    "harness.digests",
    "harness.devtools",
    "harness.api",
    "harness.cli",
)
"""Every part of tickwork, earliest first: a part imports only itself and earlier ones."""
