"""`tickwork run`: two replicas on one store run each slot exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.events import TERMINAL_TYPES
from harness.fake_llm import FakeUpstream, Step
from harness.store import open_store

TICKWORK = str(Path(sys.executable).with_name("tickwork"))
SLOTS = 20


@pytest.fixture(scope="module")
def slow_fake() -> Iterator[FakeUpstream]:
    """Every answer takes a minute: the first tick runs until cancelled, later slots overlap."""
    server = FakeUpstream().start()
    server.script("default", [Step(text="late", delay=60)] * 10)
    yield server
    server.stop()


def test_two_replicas_run_each_slot_exactly_once(
    tmp_path: Path, store_url: str, slow_fake: FakeUpstream
) -> None:
    config = tmp_path / "tickwork.toml"
    config.write_text(
        f"""
[store]
url = "{store_url}"
[paths]
results = "{tmp_path}/results"
spool = "{tmp_path}/spool"
[runner]
shutdown_grace_seconds = 1
grace_seconds = 1
[levels.fast]
every = "1s"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 120
"""
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    env.update(TICKWORK_CONFIG=str(config), OPENAI_BASE_URL=slow_fake.url)
    replicas = [
        subprocess.Popen(
            [TICKWORK, "run"],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(SLOTS + 3)
    for replica in replicas:
        replica.send_signal(signal.SIGTERM)
    logs = [replica.communicate(timeout=60)[0] for replica in replicas]
    assert [replica.returncode for replica in replicas] == [0, 0], logs

    store = open_store(store_url)
    events = store.read_all(0, limit=100_000)
    store.close()
    streams: dict[str, list[str]] = {}
    for event in events:
        streams.setdefault(event.stream_id, []).append(event.type)
    slots = [s for s in streams if s.startswith("tick-fast-")]
    assert len(slots) >= SLOTS, logs
    for stream in slots:
        types = Counter(streams[stream])
        assert types["TickScheduled"] == 1, (stream, streams[stream])
        assert sum(types[t] for t in TERMINAL_TYPES) == 1, (stream, streams[stream])
    outcomes = Counter(streams[s][-1] for s in slots)
    assert outcomes["TickSkipped"] >= SLOTS - 3
    assert outcomes["TickCancelled"] >= 1
    for stream in slots:
        tick_id = stream.removeprefix("tick-")
        winners = [
            log for log in logs if f"{tick_id} scheduled" in log or f"{tick_id} skipped" in log
        ]
        assert len(winners) == 1, tick_id
    assert all("claimed by another replica" in log for log in logs), "both replicas raced"
