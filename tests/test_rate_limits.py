"""Shared rate limits: buckets in the store that every process, host and tick counts against."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import openai
import pytest

from harness.config import ConfigError, load_settings
from harness.contracts import RateLimited
from harness.contracts.events import tick_stream
from harness.contracts.rate_limits import ProviderRateLimit, RateLimit
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.governor.alerts import Alerts
from harness.governor.proxy import create_app, proxy_governor
from harness.governor.rate_limit import await_turn, hold_back
from harness.routing import CatalogError, parse_catalog
from harness.store import Spool, SqlEventStore, open_store, release_tick, settle, take
from harness.store.rate_buckets import ARRIVAL_SLACK_SECONDS as SLACK
from harness.store.rate_buckets import PARALLEL_POLL_SECONDS, rate_leases
from tests.governor_support import config, origin_of, serving
from tests.procs import CONTEXT, gather, racing
from tests.rate_limit_support import (
    ATTEMPTS,
    SHARED_PARALLEL,
    SHARED_RPM,
    call,
    hold_a_slot,
    take_turns,
)
from tests.tick_support import Harness
from workers.model import provider_of

RETRY_AFTER = 120
TICK_TIMEOUT = 60
HELD_SECONDS = 0.2


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
    assert (turn.wait, turn.bucket, turn.reason) == (30.0 + SLACK, "target:t", "rpm")
    clock.now = 1_000_059.9 + SLACK
    assert take(store, scope, call(), clock).wait == pytest.approx(0.1)
    clock.now = 1_000_060.0 + SLACK
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
    assert (turn.wait, turn.reason) == (55.0 + SLACK, "tpm")
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
    results, taken = CONTEXT.Queue(), CONTEXT.Barrier(2)
    with racing(take_turns, (store_url, results, taken), (store_url, results, taken)) as processes:
        answers = gather(results, processes, 2)
    assert sum(rate for rate, _ in answers) == SHARED_RPM.rpm
    assert sum(parallel for _, parallel in answers) == SHARED_PARALLEL.max_parallel
    assert all(rate < ATTEMPTS for rate, _ in answers)


def test_a_dead_ticks_parallel_slot_is_freed(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    store_url = sqlite_url
    holding = CONTEXT.Event()
    holder = CONTEXT.Process(target=hold_a_slot, args=(store_url, holding))
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


def test_a_slot_of_another_host_is_held_until_its_tick_ends_or_it_expires(
    store: SqlEventStore,
) -> None:
    clock = Clock()
    scope = [("target:solo", RateLimit(max_parallel=1))]
    row = {
        "call_id": "x:1",
        "bucket": "target:solo",
        "tick_id": "x",
        "host": "elsewhere",
        "pid": 1,
        "expires_at": clock.now + 60,
    }
    with store.write_transaction() as conn:
        conn.execute(rate_leases.insert(), [row])
    assert take(store, scope, call(), clock).wait > 0, "a live host's lease holds"
    assert release_tick(store, "x") == 1, "its runner saw the tick die"
    assert take(store, scope, call(lease_seconds=60), clock).wait == 0
    assert take(store, scope, call(), clock).wait > 0, "held by the call just taken"
    clock.now += 60
    assert take(store, scope, call(), clock).wait == 0, "expired: reclaimed"


def test_a_429_with_retry_after_holds_back_every_tick_of_the_provider(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """The provider asks for a wait longer than either tick has left: neither calls again."""
    harness = Harness(tmp_path, fake)
    host = provider_of(httpx.URL(fake.url))
    settings = harness.settings.model_copy(
        update={"rate_limits": {host: ProviderRateLimit(rpm=1000)}}
    )
    harness.preparer.settings = harness.runner.settings = settings
    first = harness.preparer.prepare("min", timeout=TICK_TIMEOUT)
    second = harness.preparer.prepare("min", timeout=TICK_TIMEOUT)
    refused = Step(status=429, headers={"retry-after": str(RETRY_AFTER)})
    fake.script(first.payload.tick_id, [refused, Step(text="Not sent: the provider said wait.")])
    fake.script(second.payload.tick_id, [Step(text="Not sent either.")])
    outcomes = {"first": harness.runner.run(first), "second": harness.runner.run(second)}

    for name, prepared in (("first", first), ("second", second)):
        outcome = outcomes[name]
        assert outcome.result is not None and outcome.result.stop_reason == "rate_limit", name
        stream = harness.store.read_stream(tick_stream(prepared.payload.tick_id))
        (limited,) = [e.data for e in stream if e.type == RateLimited.type]
        assert (limited["bucket"], limited["reason"]) == (f"provider:{host}", "retry_after")
        assert not limited["taken"]
    sent = [entry.key for entry in fake.ledger]
    assert first.payload.tick_id not in sent and second.payload.tick_id not in sent
    harness.store.close()


def test_a_call_held_back_waits_its_turn_and_then_goes(store: SqlEventStore) -> None:
    scope = [("target:t", RateLimit(rpm=10))]
    began = time.time()
    hold_back(store, ["target:t"], HELD_SECONDS)
    outcome = await_turn(store, scope, call(), deadline=began + 60)
    assert outcome.taken and (outcome.bucket, outcome.reason) == ("target:t", "retry_after")
    assert time.time() - began >= HELD_SECONDS and outcome.waited > 0
    late = await_turn(store, scope, call(), deadline=time.time())
    assert late.taken and late.waited == 0
    hold_back(store, ["target:t"], 60)
    refused = await_turn(store, scope, call(), deadline=time.time() + 1)
    assert not refused.taken and refused.turn > 1


def test_bad_rate_limits_are_refused_at_load_with_the_path_of_each(tmp_path: Path) -> None:
    config = tmp_path / "tickwork.toml"
    config.write_text(
        """
[levels.min]
every = "1m"
model = "m"
rpm = 0
tpm = true
[rate_limits."https://api.openai.com/v1"]
rpm = 10
[rate_limits."api.anthropic.com"]
[rate_limits."127.0.0.1:8080"]
max_parallel = 1.5
"""
    )
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    problems = sorted(line.strip() for line in str(caught.value).splitlines()[1:])
    assert problems == [
        "levels.min.rpm: must be greater than 0",
        "levels.min.tpm: must be a valid integer",
        "rate_limits.127.0.0.1:8080.max_parallel: must be a valid integer",
        "rate_limits.api.anthropic.com: set at least one of rpm, tpm or max_parallel",
        "rate_limits.https://api.openai.com/v1.[key]: 'https://api.openai.com/v1' "
        "is not a provider host: a lowercase host name with an optional port (api.openai.com, "
        "127.0.0.1:8080), no scheme, path or credentials",
    ]

    target = {"model": "m", "execution_class": "cloud", "base_url": "http://h/v1"}
    lane = {"rule_id": "r", "reason_codes": ["c"], "candidates": ["t"]}
    document = {
        "schema_version": 1,
        "targets": {"t": {**target, "rpm": -1, "max_parallel": "2", "rps": 3}},
        "lanes": {"min": lane},
    }
    with pytest.raises(CatalogError) as refused:
        parse_catalog(document)
    assert sorted(refused.value.problems) == [
        "targets.t.max_parallel: must be a valid integer",
        "targets.t.rpm: must be greater than 0",
        "targets.t.rps: unknown field",
    ]


def test_calls_through_the_governor_proxy_take_their_turn_in_the_same_buckets(
    fake: FakeUpstream, sqlite_url: str, tmp_path: Path
) -> None:
    store = open_store(sqlite_url)
    host = provider_of(httpx.URL(fake.url))
    limits = {host: RateLimit(rpm=2)}
    settings = config(origin_of(fake), rate_limit_wait_seconds=1.0)
    with (
        proxy_governor(settings, store, Spool(tmp_path / "spool"), Alerts(()), limits) as gov,
        serving(create_app(gov), "governor proxy") as origin,
    ):
        ask = openai.OpenAI(base_url=f"{origin}/v1", api_key="k", max_retries=0)
        ask.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        # A tick's call outside the proxy takes the second turn of the same bucket.
        assert take(store, [(f"provider:{host}", limits[host])], call()).wait == 0
        with pytest.raises(openai.RateLimitError) as refused:
            ask.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert 55 < int(refused.value.response.headers["retry-after"]) <= 60 + SLACK
    assert f"provider:{host} (rpm)" in str(refused.value)
    assert gov.counters["rate_limited"] == 1
    store.close()
