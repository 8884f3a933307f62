"""How many pooled PostgreSQL connections a tickwork process needs.

One per thread that may use the store at once: a thread holds one connection at most
(`SqlEventStore` reads inside a transaction on its connection) and gives it back between
store calls.

A pool that large never makes a thread wait; one smaller (`[store] connections`) makes
threads wait their turn, and a wait longer than `POOL_WAIT_SECONDS` is ridden out as a
store outage. Beside its pool a process keeps one connection of its own, the writer's
(`harness.store.writer`), and each tick process two (its writer and one pooled read).
"""

from __future__ import annotations

from harness.config import Settings

RUN_THREADS = 9
"""`tickwork run`'s threads beside its ticks that use the store: the timetable's loop, the
status answers, the heartbeat, the alerter, the budget watch, the archiver, the compactor,
the digest scheduler, and one for the overlap buffer and backfills, which wait between
short looks."""
WORKER_THREADS = 4
"""`tickwork worker`'s threads beside its jobs: the announcement, the control follower,
the sweeper of stalled workers and the heartbeat."""
API_THREADS = 16
"""`tickwork serve` answers this many requests at once (its thread pool): each a thread."""
SERVE_THREADS = 1
"""`tickwork serve`'s own thread beside its requests: the manual ticks' supervisor."""


def run_connections(settings: Settings) -> int:
    """`tickwork run`: a thread per tick it may run at once, and its own threads."""
    return _chosen(settings, settings.runner.max_concurrent + RUN_THREADS)


def worker_connections(settings: Settings, concurrency: int) -> int:
    """`tickwork worker --concurrency N`: a thread per job, and its own threads."""
    return _chosen(settings, concurrency + WORKER_THREADS)


def serve_connections(settings: Settings) -> int:
    """`tickwork serve`: a thread per request, its manual ticks', and its own."""
    return _chosen(settings, API_THREADS + settings.runner.manual_max_concurrent + SERVE_THREADS)


def _chosen(settings: Settings, needed: int) -> int:
    """What the process needs, or the operator's `[store] connections` if set."""
    return settings.store.connections or needed
