"""Processes that take turns from the store's rate buckets (forked: tests/procs.py)."""

from __future__ import annotations

import signal
import uuid
from multiprocessing.synchronize import Barrier, Event
from typing import Any

from harness.contracts.rate_limits import RateLimit
from harness.store import Call, open_store, take

SHARED_RPM = RateLimit(rpm=15)
SHARED_PARALLEL = RateLimit(max_parallel=4)
ATTEMPTS = 20


def call(tokens: int = 10, lease_seconds: float = 60.0) -> Call:
    """A call asking for its turn, unique."""
    return Call(call_id=uuid.uuid4().hex, tokens=tokens, lease_seconds=lease_seconds)


def take_turns(url: str, results: Any, taken: Barrier, start: Event) -> None:
    """Ask ATTEMPTS times of each shared bucket without waiting; answer how many were taken.

    Each racer lives until both have asked (`taken`): a racer that ended first would be a
    dead holder, whose parallel slots the other rightly takes back.
    """
    store = open_store(url)
    start.wait()
    by_rate = sum(
        take(store, [("target:shared", SHARED_RPM)], call()).wait == 0 for _ in range(ATTEMPTS)
    )
    in_flight = sum(
        take(store, [("level:shared", SHARED_PARALLEL)], call()).wait == 0 for _ in range(ATTEMPTS)
    )
    taken.wait(120)
    store.close()
    results.put((by_rate, in_flight))


def hold_a_slot(url: str, holding: Event) -> None:
    """Take the one parallel slot of `target:solo` and hold it until killed."""
    store = open_store(url)
    assert (
        take(store, [("target:solo", RateLimit(max_parallel=1))], call(lease_seconds=3600)).wait
        == 0
    )
    holding.set()
    signal.pause()
