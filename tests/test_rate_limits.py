"""Shared rate limits: buckets in the store that every process, host and tick counts against."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from pathlib import Path

import pytest

from harness.config import ConfigError, load_settings
from harness.contracts.rate_limits import RateLimit
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.routing.catalog import CatalogError, parse_catalog
from harness.store import SqlEventStore, open_store, release_tick, settle, take
from harness.store.rate_buckets import PARALLEL_POLL_SECONDS, rate_leases
from tests.procs import gather, racing
from tests.rate_limit_support import (
    ATTEMPTS,
    SHARED_PARALLEL,
    SHARED_RPM,
    call,
    hold_a_slot,
    take_turns,
)


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_bucket_lets_its_rpm_through_in_any_minute_and_says_when_the_next_fits(
    store: SqlEventStore,
) -> None:
    clock = Clock()
    scope = [("target:t", RateLimit(rpm=3))]
    for offset in (0.0, 10.0, 20.0):
        clock.now = 1_000_000.0 + offset
        assert take(store, scope, call(), clock).wait == 0
    clock.now = 1_000_030.0
    turn = take(store, scope, call(), clock)
    assert (turn.wait, turn.bucket, turn.reason) == (30.0, "target:t", "rpm")
    clock.now = 1_000_059.9
    assert take(store, scope, call(), clock).wait == pytest.approx(0.1)
    clock.now = 1_000_060.0
    assert take(store, scope, call(), clock).wait == 0, "the first grant left the window"


def test_tokens_are_held_as_estimated_until_the_answer_says_what_was_used(
    store: SqlEventStore,
) -> None:
    clock = Clock()
    scope = [("provider:p", RateLimit(tpm=100))]
    first = call(tokens=60)
    assert take(store, scope, first, clock).wait == 0
    clock.now += 5
    turn = take(store, scope, call(tokens=60), clock)
    assert (turn.wait, turn.reason) == (55.0, "tpm")
    settle(store, first.call_id, 30)
    assert take(store, scope, call(tokens=60), clock).wait == 0


def test_every_bucket_in_scope_takes_the_call_or_none_does(store: SqlEventStore) -> None:
    clock = Clock()
    tight = ("target:tight", RateLimit(rpm=1))
    loose = ("level:loose", RateLimit(rpm=10, max_parallel=5))
    assert take(store, [loose, tight], call(), clock).wait == 0
    turn = take(store, [loose, tight], call(), clock)
    assert turn.bucket == "target:tight"
    with store.read_transaction() as conn:
        held = conn.execute(rate_leases.select()).all()
    assert len(held) == 1, "the refused call took no slot of the loose bucket"


def test_limits_hold_across_two_processes(store_url: str) -> None:
    results = multiprocessing.get_context("spawn").Queue()
    with racing(take_turns, (store_url, results), (store_url, results)) as processes:
        answers = gather(results, processes, 2)
    assert sum(rate for rate, _ in answers) == SHARED_RPM.rpm
    assert sum(parallel for _, parallel in answers) == SHARED_PARALLEL.max_parallel
    assert all(rate < ATTEMPTS for rate, _ in answers)


def test_a_dead_ticks_parallel_slot_is_freed(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    store_url = sqlite_url
    context = multiprocessing.get_context("spawn")
    holding = context.Event()
    holder = context.Process(target=hold_a_slot, args=(store_url, holding))
    holder.start()
    assert holding.wait(120), "the holder took its slot"
    scope = [("target:solo", RateLimit(max_parallel=1))]
    turn = take(store, scope, call())
    assert (turn.wait, turn.reason) == (PARALLEL_POLL_SECONDS, "max_parallel")
    assert holder.pid is not None
    os.kill(holder.pid, signal.SIGKILL)
    holder.join(60)
    assert take(store, scope, call()).wait == 0, "the dead holder's slot was reclaimed"
    store.close()


def test_a_slot_of_another_host_is_held_until_it_expires_or_its_tick_ends(
    store: SqlEventStore,
) -> None:
    clock = Clock()
    scope = [("target:solo", RateLimit(max_parallel=1))]
    row = {"call_id": "x:1", "bucket": "target:solo", "tick_id": "x", "host": "elsewhere",
           "pid": 1, "expires_at": clock.now + 60}
    with store.write_transaction() as conn:
        conn.execute(rate_leases.insert(), [row])
    assert take(store, scope, call(), clock).wait > 0, "a live host's lease holds"
    clock.now += 60
    assert take(store, scope, call(lease_seconds=60), clock).wait == 0, "expired: reclaimed"
    assert release_tick(store, "x") == 0
