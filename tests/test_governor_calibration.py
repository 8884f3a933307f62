"""Calibration across processes, rebuilt from zero, behind servers that hide their KV cache.

`tickwork governor` runs as an operator runs it (a real process, legacy `GOV_*` names);
the fake upstream counts tokens with its tokenizer-like rule over the rendered prompt.
Alerts through apprise to a real local receiver, once per episode.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.config import GovernorConfig
from harness.contracts.calibration import Sample
from harness.contracts.events import GOVERNOR_STREAM
from harness.devtools.fake_llm import FakeUpstream, KvCache
from harness.governor.alerts import Alerts
from harness.governor.estimate import openai_request_chars
from harness.projections.calibration import (
    CalibrationProjection,
    SharedCalibrations,
    load_calibrations,
)
from harness.projections.projector import Projector
from harness.store import SqlEventStore
from tests import web
from tests.commands import TICKWORK, free_port
from tests.corpus import session
from tests.governor_support import governor_proxy
from tests.waiting import wait_until


def wait_for(url: str, process: subprocess.Popen[str]) -> None:
    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"governor exited: {process.communicate()}")
        try:
            web.get(url, timeout=10)
        except httpx.TransportError:
            return False
        return True

    wait_until(answers, "the governor to answer")


def governor_process(cwd: Path, upstream: str, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TICKWORK_", "GOV_"))}
    env.update(GOV_UPSTREAM=upstream, GOV_PORT=str(port), GOV_THRESHOLD="100000")
    process = subprocess.Popen(
        [TICKWORK, "governor"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(f"http://127.0.0.1:{port}/governor/status", process)
    return process


def stop(process: subprocess.Popen[str]) -> str:
    """Its output, for a failure's message."""
    process.send_signal(signal.SIGTERM)
    return "".join(process.communicate(timeout=30))


@pytest.fixture
def words_fake(request: pytest.FixtureRequest) -> Iterator[FakeUpstream]:
    kv_cache: KvCache = getattr(request, "param", "none")
    server = FakeUpstream(tokenizer="words", kv_cache=kv_cache).start()
    yield server
    server.stop()


def replay(origin: str, seeds: range, turns: int) -> None:
    with web.Client(timeout=30) as http:
        for seed in seeds:
            for request in session(seed, turns):
                answer = http.post(f"{origin}/v1/chat/completions", json=request)
                assert answer.status_code == 200, answer.text


def test_calibration_persists_from_one_governor_process_to_the_next(
    tmp_path: Path, words_fake: FakeUpstream
) -> None:
    """Each governor on a port of its own.

    The first one's port, once freed, may be taken by another test's server before the second
    binds it, whose status would then answer.
    """
    upstream = words_fake.url.removesuffix("/v1")
    port = free_port()
    first = governor_process(tmp_path, upstream, port)
    try:
        replay(f"http://127.0.0.1:{port}", range(2), 4)
        learned = status(port)["calibration"]["corpus-model"]
    finally:
        said = stop(first)
    assert learned["samples"] == 8
    port = free_port()
    second = governor_process(tmp_path, upstream, port)
    try:
        calibration = status(port)["calibration"]
    finally:
        said += stop(second)
    assert calibration.get("corpus-model") == learned, (calibration, said)


def status(port: int) -> dict[str, Any]:
    answer: dict[str, Any] = web.get(f"http://127.0.0.1:{port}/governor/status").json()
    return answer


@pytest.mark.parametrize("words_fake", ["none", "hidden", "llama"], indirect=True)
def test_calibration_converges_even_when_the_server_hides_cached_tokens(
    words_fake: FakeUpstream,
) -> None:
    config = GovernorConfig(upstream=words_fake.url.removesuffix("/v1"), soft_tokens=10**6)
    with governor_proxy(config) as (origin, governor):
        replay(origin, range(3), 8)
        learned = governor.calibrations.ratio("corpus-model")
        state = governor.calibrations.models["corpus-model"]
    truth = [
        openai_request_chars(request) / entry.prompt_tokens_total
        for request, entry in zip(
            [r for seed in range(3) for r in session(seed, 8)], words_fake.ledger, strict=True
        )
    ]
    assert learned == pytest.approx(sorted(truth)[len(truth) // 2], rel=0.10)
    if words_fake.state.kv_cache == "hidden":
        assert state.ignored > 0


def conversation(name: str, chars: int) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": f"conversation {name}"},
            {"role": "user", "content": "start"},
            {"role": "user", "content": "x" * chars},
        ],
    }


def test_alerts_are_sent_once_per_episode(
    words_fake: FakeUpstream, receiver: tuple[str, list[dict[str, Any]]]
) -> None:
    url, received = receiver
    config = GovernorConfig(
        upstream=words_fake.url.removesuffix("/v1"), soft_tokens=1000, calibrate=False
    )
    with (
        governor_proxy(config, alerts=Alerts((url,))) as (origin, governor),
        web.Client(timeout=30) as http,
    ):

        def send(name: str, chars: int, expected: int) -> None:
            http.post(f"{origin}/v1/chat/completions", json=conversation(name, chars))
            wait_until(lambda: len(received) >= expected, f"{expected} alert(s)", interval=0.05)
            assert len(received) == expected

        for _ in range(3):
            send("a", 4000, 1)
        send("b", 4000, 2)
        send("a", 10, 2)  # back under the threshold: episode a ends
        send("a", 4000, 3)
        wait_until(lambda: governor.alerts.sent >= 3, "the third alert counted")
    assert "soft" in received[0]["title"] and "m" in received[0]["title"]
    assert governor.alerts.sent == 3


def test_calibration_rebuilt_from_zero_equals_the_incremental_one(store: SqlEventStore) -> None:
    projector = Projector(store, [CalibrationProjection()], batch_size=7)
    ratios = [2.5, 2.6, 9.0, 2.4, 5.0, 2.5, 0.5, 2.55] * 4
    for index, ratio in enumerate(ratios):
        sample = Sample(10_000 + index, round((10_000 + index) / ratio))
        store.append(GOVERNOR_STREAM, [sample.event(f"m{index % 3}", "proxy", None).to_record()])
        if index % 5 == 0:
            projector.catch_up()
    projector.catch_up()
    with store.read_transaction() as conn:
        incremental = load_calibrations(conn)
    projector.rebuild("calibration")
    with store.read_transaction() as conn:
        assert load_calibrations(conn) == incremental
    assert sum(state.ignored for state in incremental.values()) > 0
    assert sum(state.samples for state in incremental.values()) + sum(
        state.ignored for state in incremental.values()
    ) == len(ratios)


def test_ticks_prepared_at_once_share_a_catch_up_begun_after_they_asked(
    store: SqlEventStore,
) -> None:
    """One catch-up serves the callers that waited while another ran.

    None is served by one begun before it asked: a sample recorded before a call is in
    what it gets back.
    """
    shared = SharedCalibrations(store)
    folding = shared._folding = CountedLock()

    def record(model: str) -> None:
        event = Sample(chars=4_000, prompt_tokens=1_000).event(model, "worker", None)
        store.append(GOVERNOR_STREAM, [event.to_record()])

    record("m1")
    assert shared.current(["m1", "m2"]).keys() == {"m1"}
    record("m2")
    results: list[set[str]] = []
    with folding.lock:  # a catch-up under way: eight ticks ask meanwhile
        callers = [
            threading.Thread(target=lambda: results.append(set(shared.current(["m2"]))))
            for _ in range(8)
        ]
        for caller in callers:
            caller.start()
        wait_until(lambda: folding.entering == 1 + 8, "eight callers waiting")
    for caller in callers:
        caller.join()
    assert results == [{"m2"}] * 8
    assert shared._begun == 2, "the eight shared one catch-up"


class CountedLock:
    """A lock that counts who came to take it, so a test knows when callers wait on it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entering = 0

    def __enter__(self) -> None:
        self.entering += 1
        self.lock.acquire()

    def __exit__(self, *_: object) -> None:
        self.lock.release()
