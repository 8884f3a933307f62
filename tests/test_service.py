"""`tickwork run`: two replicas on one store run each slot exactly once."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import psutil
import pytest

from harness.config import LevelConfig, PathsConfig, Settings, StoreConfig
from harness.contracts.events import TERMINAL_TYPES, utcnow
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.execution.executors import LocalExecutor
from harness.execution.launchers import ColdLauncher
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling.control import operator
from harness.scheduling.outage import OwedSlots
from harness.scheduling.reconcile import reconcile
from harness.scheduling.timetable import Slot
from harness.scheduling.waves import SlotClaim
from harness.store import StoreError, beats, open_store
from tests.commands import (
    COLD,
    ForkedCommand,
    Output,
    busy_level,
    environment,
    fake_server,
    forked_cli,
    forked_each,
    start,
    start_service,
    write_config,
)
from tests.tick_support import NAMED_UPSTREAM, require_cli
from tests.waiting import long_enough, wait_until

SLOTS = 10


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
    # Ticks overlap the first one, which runs until cancelled: a tick or two start in all,
    # each cold for less than each replica's fork server would spend warming up.
    config = write_config(tmp_path, level, runner=COLD, store_url=store_url)
    replicas = [Output(start_service(config, slow_fake)) for _ in range(2)]
    # Started together, the replicas race for the same slots until one loses a claim. The
    # other then restarts: at its start it fires the slots of its last few seconds, which
    # the loser has claimed, so each replica is shown losing a race without waiting for
    # chance to make the first winner lose too.
    loser = wait_until(
        lambda: next((r for r in replicas if "claimed by another replica" in r.text()), None),
        "a replica to lose a claim",
    )
    [winner] = [replica for replica in replicas if replica is not loser]
    winner_log = winner.stop()
    assert winner.process.returncode == 0, winner_log
    restarted = Output(start_service(config, slow_fake))
    joined = restarted.wait_for("joining as a replica")
    assert f"scheduler pid {loser.process.pid} " in joined, joined
    restarted.wait_for("claimed by another replica")

    def claimed() -> bool:
        watcher = open_store(store_url)
        slots = {e.stream_id for e in watcher.read_all(0, 100_000, ["TickScheduled"])}
        watcher.close()
        return len(slots) >= SLOTS

    wait_until(claimed, f"{SLOTS} slots claimed", timeout=SLOTS * 6, interval=0.25)
    logs = [winner_log + restarted.stop(), loser.stop()]
    assert [restarted.process.returncode, loser.process.returncode] == [0, 0], logs

    store = open_store(store_url)
    events = store.read_all(0, limit=100_000)
    assert beats(store) == [], "a scheduler that stops takes its heartbeat with it"
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


def _service_config(tmp_path: Path, timeout: float) -> Path:
    level = f"""
[levels.slow]
every = "1h"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = {timeout}
"""
    # A timeout not retried: the tick has one worker, the one its killed runner leaves.
    # The service started on it only watches that tick (its level's next slot is an hour
    # away): the cold launcher spares it a fork server warming up for no tick.
    return write_config(tmp_path, level, runner=f"infra_retries = 0\n{COLD}")


def _start_one_tick_then_kill_the_service(config: Path, fake: FakeUpstream) -> tuple[str, int]:
    """Run one tick with `tickwork tick`, then SIGKILL that runner mid-tick.

    What a crash of `tickwork run` leaves behind: a worker in its own process group,
    still running, and a tick stream without an end. On a machine too slow for the tick's
    timeout the runner ends the tick before its worker asks the model; it is killed then
    all the same, and the tick's stream shows it.
    """
    runner = start("tick slow", config, fake)
    store = open_store(f"sqlite:///{config.parent}/events.db")
    started = wait_until(
        lambda: [e for e in store.read_all(0, 1000) if e.type == "TickStarted"], "the tick to start"
    )
    tick_id = started[0].data["tick_id"]
    wait_until(
        lambda: (
            tick_id in fake.state.first_request
            or {e.type for e in store.read_stream(f"tick-{tick_id}")} & TERMINAL_TYPES
        ),
        "the worker to ask the model (or the tick to end first)",
    )
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    store.close()
    return tick_id, started[0].data["pid"]


def _run_service_until_the_tick_ends(config: Path, fake: FakeUpstream, tick_id: str) -> str:
    """Start a service, let it run until the tick's stream has its end, stop it."""
    service = Output(start_service(config, fake))
    service.wait_for("tickwork running")
    wait_until(
        lambda: set(_stream(config, tick_id)) & TERMINAL_TYPES, f"an end of {tick_id}", timeout=120
    )
    output = service.stop()
    assert service.process.returncode == 0, output
    return output


def _ended(pid: int) -> bool:
    """The process has exited (a zombie has: only its reaping is left)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _stream(config: Path, tick_id: str) -> list[str]:
    store = open_store(f"sqlite:///{config.parent}/events.db")
    types = [e.type for e in store.read_stream(f"tick-{tick_id}")]
    store.close()
    return types


def test_a_restarted_service_adopts_a_running_worker_and_kills_it_at_its_deadline(
    tmp_path: Path,
) -> None:
    Restart = tuple[Path, str, int, bool, str]

    def restarted(timeout: float) -> Restart:
        folder = tmp_path / f"{timeout:g}s"
        folder.mkdir()
        with fake_server([Step(text="never in time", delay=60)]) as fake:
            config = _service_config(folder, timeout)
            tick_id, pid = _start_one_tick_then_kill_the_service(config, fake)
            outlived = psutil.pid_exists(pid)
            output = _run_service_until_the_tick_ends(config, fake, tick_id)
        return config, tick_id, pid, outlived, output

    def adopted_before_its_deadline(restart: Restart) -> bool:
        _, tick_id, pid, _, output = restart
        return (
            re.search(rf"{tick_id} adopted: its worker {pid} .*\(\d+ s left\)", output) is not None
        )

    config, tick_id, pid, outlived, output = long_enough(
        restarted, adopted_before_its_deadline, first=6, cap=32
    )
    assert outlived, f"the worker should outlive its killed runner: {_stream(config, tick_id)}"
    assert f"{tick_id} adopted" in output, output
    types = _stream(config, tick_id)
    assert [t for t in types if t in TERMINAL_TYPES] == ["TickTimedOut"], types
    assert _ended(pid)


def test_a_restarted_service_completes_a_tick_from_its_late_result(tmp_path: Path) -> None:
    with fake_server([Step(text="done while nobody watched", delay=2)]) as fake:
        config = _service_config(tmp_path, timeout=60)
        tick_id, pid = _start_one_tick_then_kill_the_service(config, fake)
        wait_until(lambda: _ended(pid), f"the worker {pid} to end")
        output = _run_service_until_the_tick_ends(config, fake, tick_id)
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
    runner = Runner(settings, store, ColdLauncher())  # no tick starts: no fork server warms
    preparer = Preparer(settings, store, env=NAMED_UPSTREAM)
    executor = LocalExecutor(settings, preparer, runner, reports.append)
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


def _running_and_queued(config: Path) -> bool:
    """A tick has started and another waits for its place; the one cap holds them so."""
    store = open_store(f"sqlite:///{config.parent}/events.db")
    streams: dict[str, set[str]] = {}
    for event in store.read_all(0, 100_000):
        streams.setdefault(event.stream_id, set()).add(event.type)
    store.close()
    open_ticks = [t for s, t in streams.items() if s.startswith("tick-") and not t & TERMINAL_TYPES]
    return any("TickStarted" in t for t in open_ticks) and any(
        "TickStarted" not in t for t in open_ticks
    )


def test_cancel_reaches_queued_and_running_ticks_of_a_live_service(tmp_path: Path) -> None:
    config = write_config(tmp_path, busy_level("2s"), runner="max_concurrent = 1")
    with fake_server([Step(text="late", delay=60)] * 20) as fake:
        service = start_service(config, fake)
        try:
            wait_until(lambda: _running_and_queued(config), "a running and a queued tick")
            status = forked_cli("status", config, fake).stdout
            assert " running " in status and " scheduled " in status, status
            cancelled = forked_cli("cancel busy --wait 60", config, fake)
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


def test_owed_slots_settle_as_a_restart_would_and_stay_owed_while_the_store_is_out(
    tmp_path: Path,
) -> None:
    settings = Settings(
        store=StoreConfig(url=f"sqlite:///{tmp_path}/events.db"),
        paths=PathsConfig(results=tmp_path / "r", spool=tmp_path / "s"),
        levels={"min": LevelConfig(every="1m", model="m", catch_up_seconds=600)},
    )
    reports: list[str] = []
    owed = OwedSlots(reports.append)
    now = utcnow().replace(second=0, microsecond=0)
    wave = [(now - timedelta(minutes=n), "min") for n in (2, 1)]
    owed.owe(wave)
    fired: list[tuple[list[Slot], set[Slot]]] = []

    def store_out(due: Sequence[Slot], missed: Collection[Slot]) -> None:
        owed.owe(due)  # as `Service.fire` does when a wave's claim fails

    with pytest.raises(StoreError, match="went away again"):
        owed.settle(settings, store_out)
    owed.settle(settings, lambda due, missed: fired.append((list(due), set(missed))))
    assert fired == [(sorted(wave), {wave[0]})], "the latest, within catch-up, runs"
    assert reports[-1] == "2 slot(s) due while the store was out: 1 missed"
    owed.settle(settings, lambda due, missed: fired.append((list(due), set(missed))))
    assert len(fired) == 1, "settled once"


def test_a_level_on_a_cli_that_is_not_installed_is_refused_alone_and_the_others_run(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    agents = tmp_path / "no-agents"
    levels = f"""
[agents]
dir = "{agents}"
[levels.fast]
every = "1s"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 60
[levels.coder]
every = "1s"
prompt = "Fix the build."
model = "claude-fake"
api = "anthropic"
agent = "claude-code"
"""
    config = write_config(tmp_path, levels)
    fix = f"npm ci --prefix {agents}` (or `make`)"
    service = Output(start_service(config, fake))
    assert fix in service.wait_for("levels.coder.agent = 'claude-code'")
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    try:
        wait_until(
            lambda: store.read_all(0, 10_000, ["TickCompleted"]),
            "a tick of the other level to complete",
            timeout=120,
        )
        status = forked_cli("status", config, fake)
        described = forked_cli("levels coder", config, fake)
        refused_tick = forked_cli("tick coder", config, fake)
        output = service.stop()
        assert service.process.returncode == 0, output
        streams = {e.stream_id for e in store.read_all(0, 100_000)}
    finally:
        store.close()
    assert not [stream for stream in streams if stream.startswith("tick-coder")], streams
    said = [" ".join(text.split()) for text in (status.stdout, described.stdout)]
    assert "level coder is refused: levels.coder.agent = 'claude-code'" in said[0]
    assert "refused, it does not run" in said[1] and all(fix in text for text in said)
    assert refused_tick.returncode == 2 and fix in " ".join(refused_tick.stderr.split())


UPSTREAM_VARIABLES = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_KEY",
    "OLLAMA_HOST",
)
WIRES = {
    "chat": ("openai-chat", "strands"),
    "responses": ("openai-responses", "strands"),
    "messages": ("anthropic", "strands"),
    "local": ("ollama", "strands"),
    "coder": ("anthropic", "claude-code"),
}


def _wire_levels(every: str, names: Collection[str]) -> str:
    return "".join(
        f"""
[levels.{name}]
every = "{every}"
prompt = "Anything new?"
model = "fake-model"
api = "{WIRES[name][0]}"
agent = "{WIRES[name][1]}"
timeout_seconds = 240
"""
        for name in names
    )


def test_without_an_upstream_every_wire_protocol_talks_to_the_fake(tmp_path: Path) -> None:
    require_cli("claude-code")
    # No slot of the service's comes due within the test; its fork server would warm up
    # every protocol and Claude Code (4 s of CPU) for ticks that never start.
    config = write_config(tmp_path, _wire_levels("1h", WIRES), runner=COLD)
    env = {
        name: value
        for name, value in environment(TICKWORK_CONFIG=str(config)).items()
        if name not in UPSTREAM_VARIABLES
    }
    service = Output(
        ForkedCommand(tmp_path, ["run"], env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    )
    try:
        service.wait_for("tickwork running")
        banner = service.text()
        for api in ("openai-chat", "openai-responses", "anthropic", "ollama"):
            assert f"  upstream  {api}: tickwork's fake at http://127.0.0.1:" in banner, banner
        by_hand = forked_each(
            tmp_path, [["tick", name] for name in WIRES], {}, unset=UPSTREAM_VARIABLES
        )
    finally:
        output = service.stop()
    for name, ticked in zip(WIRES, by_hand, strict=True):
        assert ticked.returncode == 0, (name, ticked.stdout, ticked.stderr, output)
        assert "the running service's fake" in ticked.stderr
        assert "status  completed" in ticked.stdout, (name, ticked.stdout)


def test_a_level_bound_for_a_real_host_without_its_key_is_refused_before_its_tick(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    config = write_config(tmp_path, _wire_levels("1s", ["messages", "chat"]))
    env = {
        **{
            name: value
            for name, value in environment(TICKWORK_CONFIG=str(config)).items()
            if name not in UPSTREAM_VARIABLES
        },
        "OPENAI_BASE_URL": fake.url,
    }
    service = Output(
        ForkedCommand(tmp_path, ["run"], env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    )
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    try:
        banner = service.wait_for("  upstream  anthropic: ")
        failed = wait_until(
            lambda: store.read_all(0, 10_000, ["TickFailed"]), "a tick of the keyless level"
        )
        wait_until(
            lambda: store.read_all(0, 10_000, ["TickCompleted"]), "a tick of the other level"
        )
        by_hand = forked_each(tmp_path, [["tick", "messages"]], {"OPENAI_BASE_URL": fake.url})[0]
        output = service.stop()
        events = store.read_all(0, 100_000)
    finally:
        store.close()
    why = "api 'anthropic' goes to https://api.anthropic.com (ANTHROPIC_BASE_URL is not set)"
    assert "its ticks are refused" in banner and why in banner, output
    assert failed[0].stream_id.startswith("tick-messages-") and why in failed[0].data["reason"]
    types = {e.type for e in events if e.stream_id.startswith(("tick-messages", "level-messages"))}
    assert not types & {"TickStarted", "TickAttemptFailed", "LevelPaused"}, types
    assert by_hand.returncode == 2 and why in by_hand.stderr


def test_the_log_tells_each_state_change_with_who_why_and_how_to_undo_it(
    tmp_path: Path,
) -> None:
    config = write_config(
        tmp_path, busy_level("1s").replace("busy", "min"), runner="infra_retries = 0"
    )
    with fake_server([Step(status=500)] * 50) as fake:
        service = Output(start_service(config, fake))
        try:
            paused = service.wait_for("min paused (")
            assert "failed on infrastructure" in paused and "scripted status 500" in paused, paused
            assert paused.rstrip().endswith(
                ": by tickwork; no tick starts until `tickwork resume min`"
            ), paused
            who = operator()
            for command, line in (
                ("resume min", f"min resumed: by {who}"),
                (
                    "pause min --note check-the-gateway",
                    f'min paused (paused by operator): by {who}, note "check-the-gateway"',
                ),
                ("cancel min", f"cancel min requested: by {who}"),
                ("cancel --clear min", f"cancel min cleared: by {who}"),
            ):
                done = forked_cli(command, config, fake)
                assert done.returncode == 0, done.stdout + done.stderr
                service.wait_for(line)
            start = (utcnow() - timedelta(minutes=2)).replace(microsecond=0)
            ends = f"--from {start.isoformat()} --to {(start + timedelta(seconds=2)).isoformat()}"
            done = forked_cli(f"backfill min {ends}", config, fake)
            assert done.returncode == 0, done.stdout + done.stderr
            requested = service.wait_for("requested (min, 2 slot(s) from")
            assert f": by {who}; stop it with `tickwork cancel --backfill bf-" in requested
        finally:
            output = service.stop()
    assert service.process.returncode == 0, output


def test_a_thread_that_meets_an_unexpected_error_stops_the_service_in_one_line() -> None:
    """No `Exception in thread` and traceback, and no process running on without the thread.

    The hook `tickwork run` and `tickwork worker` install says it in one line and sends
    the process SIGTERM, as an operator's stop: here a process with no handler of its own
    ends by it, and never reaches its last line.
    """
    script = (
        "import signal, threading\n"
        "from harness.cli.thread_crashes import ThreadCrashes\n"
        "ThreadCrashes(print).install()\n"
        "def heartbeat():\n"
        "    raise ValueError('a bug')\n"
        "threading.Thread(target=heartbeat, name='heartbeat').start()\n"
        "signal.sigwait([signal.SIGUSR1])\n"
        "print('still running')\n"
    )
    ended = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert ended.returncode == -signal.SIGTERM, ended
    assert ended.stdout == (
        "stopping: thread heartbeat ended on an unexpected error, ValueError: a bug\n"
    )
    assert "Exception in thread" not in ended.stderr
    assert "Traceback" not in ended.stderr


def levels_every(every: str, count: int = 3) -> str:
    """`count` levels that each fire every `every`, whose ticks skip a slot while in flight."""
    return "".join(
        f'[levels.l{n}]\nevery = "{every}"\nprompt = "Anything new?"\nmodel = "fake-model"\n'
        for n in range(count)
    )


def test_the_log_and_status_say_when_the_levels_ask_for_more_starts_than_the_service_has(
    tmp_path: Path,
) -> None:
    """Three levels every 2 s ask for 90 starts a minute; one start in 5 s allows 12."""
    runner = "start_spacing_seconds = 5\nmax_concurrent = 1"
    config = write_config(tmp_path, levels_every("2s"), runner=runner)
    with fake_server([Step(text="late", delay=60)] * 10) as fake:
        service = Output(start_service(config, fake))
        try:
            warned = service.wait_for("capacity: the levels ask for")
            assert warned.split(" ", 1)[1].rstrip() == (
                "capacity: the levels ask for 90 slots a minute, more than the start spacing "
                "(5 s) allows (12 a minute): ticks wait in the queue, and slots whose level's "
                "tick still waits are skipped (overlap); see `tickwork status`, [runner] "
                "start_spacing_seconds and max_concurrent"
            )
            running = service.wait_for(", running for ")
            held = r"skipped: a tick of (l\d) is still in flight: \1-\S+"
            assert re.search(held + ", running for", running), running
            queued = service.wait_for(", queued for ")
            assert re.search(
                held + r", queued for [\d.]+ s, "
                r"(first in the queue|behind [12] other tick\(s\)) "
                r"\([01] of 1 places taken; starts 5 s apart: at most 12 a minute\)$",
                queued.rstrip(),
            ), queued
            skipped_id = queued.split()[1]
            store = open_store(f"sqlite:///{tmp_path}/events.db")
            skip = store.read_stream(f"tick-{skipped_id}")[-1]
            store.close()
            assert skip.data["reason"] == "overlap", skip
            assert queued.rstrip().endswith(f"skipped: {skip.data['held']}"), "the event says it"
            shown = forked_cli(f"show {skipped_id}", config, fake)
            assert f"skipped ({skip.data['held']})" in " ".join(shown.stdout.split()), shown.stdout
            status = forked_cli("status", config, fake)
            assert status.returncode == 0, status.stderr
            assert (
                "capacity: demand 90 slots a minute (3 level(s)); the start spacing (5 s) allows "
                "12 starts a minute; 1 places at once (no tick of theirs has run yet to time them)"
            ) in status.stdout, status.stdout
            assert "capacity: the levels ask for 90 slots a minute" in status.stdout
            config.write_text(config.read_text().replace('every = "2s"', 'every = "1m"'))
            service.process.send_signal(signal.SIGHUP)
            within = service.wait_for("within what the service can start")
            assert "capacity: demand 3 slots a minute (3 level(s));" in within, within
        finally:
            output = service.stop()
    assert output.count("capacity: the levels ask for") == 1, "warned once"
