"""The service survives what it claims to survive: here, its store going away for a while.

`tickwork run` on PostgreSQL behind a TCP proxy of the test's own; the proxy refuses and
drops every connection for 20 s while ticks run, then lets them through again.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections import Counter
from pathlib import Path

from sqlalchemy.engine import make_url

from harness.contracts.events import TERMINAL_TYPES
from harness.devtools.fake_llm import Step
from harness.store import migrate_store, open_store
from tests.conftest import fresh_pg_database
from tests.tcp_proxy import TcpProxy
from tests.test_lifecycle import until
from tests.test_service import fake_server, start_service, write_config

OUTAGE_SECONDS = 20

LEVEL = """
[levels.busy]
every = "2s"
overlap = "allow"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 60
"""


def test_a_store_outage_costs_no_running_service_and_loses_no_event(tmp_path: Path) -> None:
    with fresh_pg_database() as url:
        migrate_store(url)
        proxy = TcpProxy(("127.0.0.1", make_url(url).port or 5432)).start()
        proxied = make_url(url).set(port=proxy.port).render_as_string(hide_password=False)
        config = write_config(tmp_path, LEVEL, store_url=proxied)
        store = open_store(url)
        with fake_server([Step(text="done", delay=2)] * 200) as fake:
            service = start_service(config, fake)
            lines: list[str] = []
            assert service.stdout is not None
            reader = threading.Thread(target=lambda: lines.extend(service.stdout or []))
            reader.start()
            try:
                started = lambda: [e for e in store.read_all(0, 10_000) if e.type == "TickStarted"]  # noqa: E731
                until(lambda: bool(started()), "no tick started", 60)
                proxy.cut()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    service.wait(OUTAGE_SECONDS)
                assert service.poll() is None, "the service died in the outage: " + "".join(lines)
                proxy.start()
                after = store.last_position()
                until(
                    lambda: any(e.type == "TickCompleted" for e in store.read_all(after, 10_000)),
                    "no tick completed after the store came back",
                    60,
                )
            finally:
                service.send_signal(signal.SIGTERM)
                service.wait(60)
                reader.join()
                proxy.cut()
        output = "".join(lines)
        assert service.returncode == 0, output
        assert output.count("store unreachable") == 1, output
        assert "store back after" in output, output
        assert not list((tmp_path / "spool").glob("*.jsonl")), "spooled events left behind"
        events = store.read_all(0, 100_000)
        assert len({e.event_id for e in events}) == len(events)
        terminal = Counter(e.stream_id for e in events if e.type in TERMINAL_TYPES)
        ticks = {e.stream_id for e in events if e.stream_id.startswith("tick-")}
        unended = {t: terminal[t] for t in ticks if terminal[t] != 1}
        assert ticks and not unended, f"{unended}\n{output}"
        store.close()
