"""The service survives what it claims to survive: here, its store going away for a while.

`tickwork run` on PostgreSQL behind a TCP proxy of the test's own; the proxy refuses and
drops every connection while ticks run, until the service has said so, spooled events
and let a slot fall due, then lets them through again.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from harness.contracts.events import TERMINAL_TYPES, utcnow
from harness.devtools.fake_llm import Step
from harness.scheduling.service import JUST_DUE
from harness.store import StoredEvent, migrate_store, open_store
from harness.store.spool import Spool
from tests.commands import COLD, Output, busy_level, fake_server, start_service, write_config
from tests.conftest import fresh_pg_database
from tests.tcp_proxy import TcpProxy
from tests.waiting import long_enough, wait_until

OWED = re.compile(r"(\d+) slot\(s\) due while the store was out")


@dataclass(frozen=True)
class Ridden:
    """What a service that rode out an outage printed, left in its spool and stored."""

    output: str
    returncode: int | None
    spooled: list[Path]
    events: list[StoredEvent]


@contextmanager
def behind_a_proxy(folder: Path, every: str) -> Iterator[tuple[str, TcpProxy, Path]]:
    """A migrated PostgreSQL store behind a proxy the test can cut or stall.

    Yields the store's own URL, the proxy, and the config of a service that reaches the
    store through the proxy, whose level `busy` fires `every`.
    """
    with fresh_pg_database() as url:
        migrate_store(url)
        proxy = TcpProxy(("127.0.0.1", make_url(url).port or 5432)).start()
        proxied = make_url(url).set(port=proxy.port).render_as_string(hide_password=False)
        yield url, proxy, write_config(folder, busy_level(every, timeout=60), store_url=proxied)


def ride_out(tmp_path: Path, outage: float) -> Ridden:
    """Run a service through a store outage of at least `outage` seconds, then stop it.

    The outage lasts, beyond that, until the service has said the store is unreachable
    and ticks running through it have spooled events.
    """
    folder = tmp_path / f"{outage:g}s"
    folder.mkdir()
    with behind_a_proxy(folder, "2s") as (url, proxy, config):
        store = open_store(url)
        with fake_server([Step(text="done", delay=2)] * 200) as fake:
            service = start_service(config, fake)
            lines: list[str] = []
            assert service.stdout is not None
            reader = threading.Thread(target=lambda: lines.extend(service.stdout or []))
            reader.start()
            try:
                started = lambda: [e for e in store.read_all(0, 10_000) if e.type == "TickStarted"]  # noqa: E731
                wait_until(lambda: bool(started()), "no tick started", 60)
                proxy.cut()
                cut = time.monotonic()
                wait_until(
                    lambda: (
                        any("store unreachable" in line for line in lines)
                        or service.poll() is not None
                    ),
                    "the service to notice the outage",
                )
                wait_until(
                    lambda: Spool(folder / "spool").files() or service.poll() is not None,
                    "a running tick to spool its events",
                )
                with contextlib.suppress(subprocess.TimeoutExpired):
                    service.wait(max(0.0, cut + outage - time.monotonic()))
                assert service.poll() is None, "the service died in the outage: " + "".join(lines)
                proxy.start()
                wait_until(
                    lambda: any("store back after" in line for line in lines),
                    "the service never saw the store come back",
                    60,
                )
                after = store.last_position()
                wait_until(
                    lambda: any(e.type == "TickCompleted" for e in store.read_all(after, 10_000)),
                    "no tick completed after the store came back",
                    60,
                )
            finally:
                service.send_signal(signal.SIGTERM)
                service.wait(60)
                reader.join()
                proxy.cut()
        events = store.read_all(0, 100_000)
        store.close()
    return Ridden("".join(lines), service.returncode, Spool(folder / "spool").files(), events)


@pytest.mark.long
def test_a_store_outage_costs_no_running_service_and_loses_no_event(tmp_path: Path) -> None:
    ridden = long_enough(
        lambda outage: ride_out(tmp_path, outage),
        lambda ridden: OWED.search(ridden.output) is not None,  # a slot fell due in the outage
        first=3,
        cap=24,
    )
    output, events = ridden.output, ridden.events
    assert ridden.returncode == 0, output
    assert output.count("store unreachable") == 1, output
    assert "store back after" in output, output
    assert not ridden.spooled, "spooled events left behind"
    assert len({e.event_id for e in events}) == len(events)
    terminal = Counter(e.stream_id for e in events if e.type in TERMINAL_TYPES)
    ticks = {e.stream_id for e in events if e.stream_id.startswith("tick-")}
    unended = {t: terminal[t] for t in ticks if terminal[t] != 1}
    assert ticks and not unended, f"{unended}\n{output}"
    slots = sorted({e.data["slot"] for e in events if e.type == "TickScheduled"})
    steps = {
        datetime.fromisoformat(later) - datetime.fromisoformat(earlier)
        for earlier, later in pairwise(slots)
    }
    assert steps == {timedelta(seconds=2)}, f"slots due in the outage were lost\n{output}"
    skipped = {e.data["reason"] for e in events if e.type == "TickSkipped"}
    assert "missed" in skipped and "not scheduled" not in output, output


SLOW = """
[levels.slow]
every = "2s"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 120
"""


def slow_service(tmp_path: Path, grace: float) -> Path:
    """A service whose first tick runs for two minutes; later slots overlap and are skipped."""
    config = write_config(tmp_path, SLOW)
    config.write_text(
        config.read_text().replace(
            "shutdown_grace_seconds = 1", f"shutdown_grace_seconds = {grace}"
        )
    )
    return config


def ended(tmp_path: Path) -> list[tuple[str, str]]:
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    events = store.read_all(0, 10_000)
    store.close()
    terminal = [e for e in events if e.type in TERMINAL_TYPES and e.type != "TickSkipped"]
    ticks = {e.stream_id for e in events if e.type == "TickScheduled"}
    skipped = {e.stream_id for e in events if e.type == "TickSkipped"}
    assert len(terminal) == len(ticks - skipped), "a tick was left open"
    return [(e.type, e.data.get("reason", "")) for e in terminal]


def test_a_second_ctrl_c_on_tickwork_run_cancels_the_running_ticks_now(tmp_path: Path) -> None:
    config = slow_service(tmp_path, grace=300)
    with fake_server([Step(text="late", delay=120)]) as fake:
        service = start_service(config, fake)
        assert service.stdout is not None
        lines: list[str] = []
        try:
            wait_until(lambda: bool(fake.state.first_request), "no tick reached the upstream", 60)
            service.send_signal(signal.SIGINT)
            for line in service.stdout:
                lines.append(line)
                if "stopping:" in line:
                    break
            # The second to a thread that is not the main one, which joins the ticks' threads.
            service.send_signal_to_a_thread(signal.SIGINT)
            lines.extend(service.stdout)
            service.wait(60)
        finally:
            if service.poll() is None:
                service.kill()
    output = "".join(lines)
    assert service.returncode == 0, output
    assert "stopping: 1 tick(s)" in output and "second interrupt" in output, output
    assert ended(tmp_path) == [("TickCancelled", "service stopped (forced)")], output


def test_tickwork_run_outlives_its_closed_stdout(tmp_path: Path) -> None:
    config = slow_service(tmp_path, grace=1)
    with fake_server([Step(text="done", delay=1)] * 50) as fake:
        service = start_service(config, fake)
        assert service.stdout is not None
        try:
            lines = iter(service.stdout.readline, "")
            assert any("tickwork running" in line for line in lines), "the service never started"
            service.stdout.close()
            store = open_store(f"sqlite:///{tmp_path}/events.db")
            wait_until(
                lambda: sum(e.type == "TickCompleted" for e in store.read_all(0, 10_000)) >= 2,
                "ticks stopped completing once stdout was gone",
                60,
            )
            store.close()
            assert service.poll() is None, "the service died with its stdout"
            service.send_signal(signal.SIGTERM)
            service.wait(60)
        finally:
            if service.poll() is None:
                service.kill()
    assert service.returncode == 0
    assert {kind for kind, _ in ended(tmp_path)} <= {"TickCompleted", "TickCancelled"}


def test_ticks_a_killed_service_claimed_and_never_started_end_while_its_successor_runs(
    tmp_path: Path,
) -> None:
    # Each service's first tick starts at once, before a fork server could be ready, and
    # holds the only place: a warm-up would serve no tick of either service.
    config = write_config(tmp_path, busy_level("1s"), runner=f"max_concurrent = 1\n{COLD}")
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    claimed = lambda: {e.stream_id for e in store.read_all(0, 10_000) if e.type == "TickScheduled"}  # noqa: E731
    with fake_server([Step(text="late", delay=120)] * 50) as fake:
        killed = start_service(config, fake)
        wait_until(lambda: len(claimed()) >= 5, "the first service claimed too few slots", 60)
        killed.send_signal(signal.SIGKILL)
        killed.communicate(timeout=30)
        left = claimed()
        successor = start_service(config, fake)
        try:
            wait_until(
                lambda: all(
                    any(e.type in TERMINAL_TYPES for e in store.read_stream(s))
                    or any(e.type == "TickStarted" for e in store.read_stream(s))
                    for s in left
                ),
                "ticks the killed service claimed stayed open while its successor ran",
                60,
            )
        finally:
            successor.send_signal(signal.SIGTERM)
            output = successor.communicate(timeout=60)[0]
    assert successor.returncode == 0, output
    for stream in left:
        kinds = [e.type for e in store.read_stream(stream)]
        assert sum(k in TERMINAL_TYPES for k in kinds) == 1, (stream, kinds, output)
    store.close()


@pytest.mark.long
def test_slots_due_while_a_store_call_hangs_follow_the_catch_up_policy(tmp_path: Path) -> None:
    """A store host that stops answering holds the firing loop in a call that hangs.

    The slots that fall due meanwhile are claimed once the call fails, as a restart
    would claim them: skipped `missed`, none lost, none run late.
    """
    with behind_a_proxy(tmp_path, "1s") as (url, proxy, config):
        store = open_store(url)

        def slots() -> list[datetime]:
            return sorted(
                datetime.fromisoformat(e.data["slot"])
                for e in store.read_all(0, 100_000, ["TickScheduled"])
            )

        with fake_server([Step(text="done")] * 500) as fake:
            service = Output(start_service(config, fake))
            try:
                wait_until(slots, "a slot claimed")
                proxy.stall()
                stalled = utcnow()
                wait_until(
                    lambda: utcnow() - stalled > JUST_DUE + timedelta(seconds=4),
                    "slots to fall due while the store hangs",
                )
                proxy.cut()
                proxy.start()
                service.wait_for("store back after")
                back = utcnow()
                wait_until(lambda: slots()[-1] > back, "a slot claimed after the store is back")
            finally:
                output = service.stop()
                proxy.cut()
        events = store.read_all(0, 100_000)
        store.close()
    claimed = sorted(
        datetime.fromisoformat(e.data["slot"]) for e in events if e.type == "TickScheduled"
    )
    steps = {later - earlier for earlier, later in pairwise(claimed)}
    assert steps == {timedelta(seconds=1)}, f"slots due while the store hung were lost\n{output}"
    missed = [
        datetime.fromisoformat(e.data["slot"])
        for e in events
        if e.type == "TickSkipped" and e.data["reason"] == "missed"
    ]
    assert len([m for m in missed if stalled <= m < back]) >= 3, output
    ran = {e.stream_id for e in events if e.type == "TickStarted"}
    assert not {f"tick-busy-{m:%Y%m%dT%H%M%SZ}" for m in missed} & ran, "a missed slot ran"
