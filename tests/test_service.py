"""`tickwork run`: two replicas on one store run each slot exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness.config import LevelConfig, PathsConfig, Settings, StoreConfig
from harness.contracts.events import TERMINAL_TYPES
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.execution.executors import LocalExecutor
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling.reconcile import reconcile
from harness.scheduling.waves import SlotClaim
from harness.store import open_store

TICKWORK = str(Path(sys.executable).with_name("tickwork"))
SLOTS = 20


def write_config(tmp_path: Path, levels: str, runner: str = "", store_url: str = "") -> Path:
    """A tickwork.toml for a service under test: its store, folders, runner and levels."""
    config = tmp_path / "tickwork.toml"
    config.write_text(
        f"""
[store]
url = "{store_url or f"sqlite:///{tmp_path}/events.db"}"
[paths]
results = "{tmp_path}/results"
spool = "{tmp_path}/spool"
[runner]
shutdown_grace_seconds = 1
grace_seconds = 1
{runner}
{levels}
"""
    )
    return config


def start(command: str, config: Path, fake: FakeUpstream, **popen: Any) -> subprocess.Popen[str]:
    """`tickwork <command>` on the config, talking to the fake upstream."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKWORK_")}
    env.update(TICKWORK_CONFIG=str(config), OPENAI_BASE_URL=fake.url)
    return subprocess.Popen(
        [TICKWORK, *command.split()], env=env, cwd=config.parent, text=True, **popen
    )


def run_cli(command: str, config: Path, fake: FakeUpstream) -> subprocess.CompletedProcess[str]:
    process = start(command, config, fake, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=90)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def start_service(config: Path, fake: FakeUpstream) -> subprocess.Popen[str]:
    return start("run", config, fake, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


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
    level = """
[levels.fast]
every = "1s"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 120
"""
    config = write_config(tmp_path, level, store_url=store_url)
    replicas = [start_service(config, slow_fake) for _ in range(2)]
    deadline = time.monotonic() + SLOTS * 3
    claimed = 0
    while claimed < SLOTS and time.monotonic() < deadline:
        time.sleep(1)
        watcher = open_store(store_url)
        claimed = len({e.stream_id for e in watcher.read_all(0, 100_000, ["TickScheduled"])})
        watcher.close()
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


def _service_config(tmp_path: Path, timeout: int) -> Path:
    level = f"""
[levels.slow]
every = "1h"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = {timeout}
"""
    return write_config(tmp_path, level)


def _start_one_tick_then_kill_the_service(config: Path, fake: FakeUpstream) -> tuple[str, int]:
    """Run one tick with `tickwork tick`, then SIGKILL that runner mid-tick.

    What a crash of `tickwork run` leaves behind: a worker in its own process group,
    still running, and a tick stream without an end.
    """
    runner = start("tick slow", config, fake)
    store = open_store(f"sqlite:///{config.parent}/events.db")
    deadline = time.monotonic() + 30
    started = []
    while not started:
        assert time.monotonic() < deadline, "the tick never started"
        time.sleep(0.2)
        started = [e for e in store.read_all(0, 1000) if e.type == "TickStarted"]
    while started[0].data["tick_id"] not in fake.state.first_request:
        assert time.monotonic() < deadline, "the worker never asked the model"
        time.sleep(0.1)
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    store.close()
    return started[0].data["tick_id"], started[0].data["pid"]


def _run_service_briefly(config: Path, fake: FakeUpstream, seconds: float) -> str:
    """Start a service, let it run `seconds` past its start-up (reconciliation), stop it."""
    service = start_service(config, fake)
    assert service.stdout is not None
    seen = []
    while not seen or "tickwork running" not in seen[-1]:
        line = service.stdout.readline()
        assert line, "the service ended before it started: " + "".join(seen)
        seen.append(line)
    time.sleep(seconds)
    service.send_signal(signal.SIGTERM)
    output = "".join(seen) + service.communicate(timeout=60)[0]
    assert service.returncode == 0, output
    return output


def _stream(config: Path, tick_id: str) -> list[str]:
    store = open_store(f"sqlite:///{config.parent}/events.db")
    types = [e.type for e in store.read_stream(f"tick-{tick_id}")]
    store.close()
    return types


def test_a_restarted_service_adopts_a_running_worker_and_kills_it_at_its_deadline(
    tmp_path: Path,
) -> None:
    with fake_server([Step(text="never in time", delay=60)]) as fake:
        config = _service_config(tmp_path, timeout=8)
        tick_id, pid = _start_one_tick_then_kill_the_service(config, fake)
        assert psutil.pid_exists(pid), "the worker should outlive its killed runner"
        output = _run_service_briefly(config, fake, seconds=10)
    assert f"{tick_id} adopted" in output
    types = _stream(config, tick_id)
    assert [t for t in types if t in TERMINAL_TYPES] == ["TickTimedOut"], types
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_restarted_service_completes_a_tick_from_its_late_result(tmp_path: Path) -> None:
    with fake_server([Step(text="done while nobody watched", delay=2)]) as fake:
        config = _service_config(tmp_path, timeout=60)
        tick_id, pid = _start_one_tick_then_kill_the_service(config, fake)
        deadline = time.monotonic() + 30
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        output = _run_service_briefly(config, fake, seconds=3)
    assert f"{tick_id} ended while no scheduler watched: TickCompleted" in output
    types = _stream(config, tick_id)
    assert [t for t in types if t in TERMINAL_TYPES] == ["TickCompleted"], types


def test_a_claim_whose_process_is_gone_is_lost_and_a_live_ones_is_not(tmp_path: Path) -> None:
    settings = Settings(
        store=StoreConfig(url=f"sqlite:///{tmp_path}/events.db"),
        paths=PathsConfig(results=tmp_path / "r", spool=tmp_path / "s"),
        levels={"slow": LevelConfig(every="1h", model="m")},
    )
    store = open_store(settings.store.url)
    reports: list[str] = []
    runner = Runner(settings, store)
    executor = LocalExecutor(settings, Preparer(settings, store), runner, reports.append)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    dead_pid = child.pid
    orphan = SlotClaim("slow-orphan", "slow", None).scheduled("m")
    ours = SlotClaim("slow-ours", "slow", None)
    store.create_streams(
        {
            "tick-slow-orphan": [orphan.model_copy(update={"scheduler_pid": dead_pid}).to_record()],
            "tick-slow-ours": [ours.scheduled("m").to_record()],
        }
    )
    projector = projector_for(store, PriceBook())
    reconcile(store, executor, projector, reports.append)
    types = [e.type for e in store.read_stream("tick-slow-orphan")]
    assert types == ["TickScheduled", "TickLost"]
    reconcile(store, executor, projector, reports.append)
    assert [e.type for e in store.read_stream("tick-slow-orphan")] == types
    assert [e.type for e in store.read_stream("tick-slow-ours")] == ["TickScheduled"]
    store.close()


@contextmanager
def fake_server(steps: list[Step]) -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    server.script("default", steps)
    try:
        yield server
    finally:
        server.stop()


def busy_level(every: str, timeout: int = 120) -> str:
    """The level `busy`: a tick every `every`, running alongside the ticks still in flight."""
    return f"""
[levels.busy]
every = "{every}"
overlap = "allow"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = {timeout}
"""


def test_cancel_reaches_queued_and_running_ticks_of_a_live_service(tmp_path: Path) -> None:
    config = write_config(tmp_path, busy_level("2s"), runner="max_concurrent = 1")
    with fake_server([Step(text="late", delay=60)] * 20) as fake:
        service = start_service(config, fake)
        try:
            deadline = time.monotonic() + 40
            while True:
                assert time.monotonic() < deadline, "never had a running and a queued tick"
                status = run_cli("status", config, fake)
                if " running " in status.stdout and " scheduled " in status.stdout:
                    break
                time.sleep(0.5)
            cancelled = run_cli("cancel busy --wait 30", config, fake)
        finally:
            service.send_signal(signal.SIGTERM)
            output = service.communicate(timeout=60)[0]
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr + output
    ended = [line for line in cancelled.stdout.splitlines() if line.endswith("TickCancelled")]
    assert len(ended) >= 2, cancelled.stdout
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    for line in ended:
        stream = store.read_stream(f"tick-{line.split()[0]}")
        kinds = [e.type for e in stream]
        assert kinds.count("TickCancelled") == 1 and kinds[-1] == "TickCancelled", kinds
        assert "cancelled by" in stream[-1].data["reason"]
    store.close()
