"""Heartbeats: which schedulers and workers live, in bounded rows that dead ones leave."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from harness.config import Settings
from harness.prices import PriceBook
from harness.scheduling.status import snapshot
from harness.store import Heartbeat, SqlEventStore, beats
from harness.store.heartbeats import LIVE_FOR, PRUNE_AFTER, heartbeats


def _dead(store: SqlEventStore, process_id: str, silent: timedelta) -> None:
    """The row a killed scheduler left, its last beat `silent` ago."""
    at = datetime.now(UTC) - silent
    row = {
        "process_id": process_id,
        "role": "scheduler",
        "host": "gone-host",
        "pid": 4242,
        "started_at": at - timedelta(hours=1),
        "beat_at": at,
        "upstream": None,
    }
    with store.write_transaction() as conn:
        conn.execute(heartbeats.insert(), [row])


def test_a_beat_says_who_lives_prunes_old_rows_and_a_stop_removes_its_own(
    store: SqlEventStore,
) -> None:
    settings = Settings(store={"url": "sqlite://"}, levels={})
    _dead(store, "long-gone", PRUNE_AFTER + timedelta(minutes=1))
    _dead(store, "just-died", LIVE_FOR + timedelta(seconds=5))
    status = snapshot(settings, store, PriceBook())
    assert status.live == []
    assert status.liveness() == [
        "no scheduler running: no slot fires until `tickwork run` (last: pid 4242 on "
        f"gone-host, last beat {status.processes[0].beat_at:%Y-%m-%d %H:%M:%S} UTC)"
    ]

    heartbeat = Heartbeat(store, "scheduler", "http://127.0.0.1:9/v1")
    heartbeat.beat()
    found = beats(store)
    assert [(b.pid, b.host) for b in found] == [(os.getpid(), heartbeat.host), (4242, "gone-host")]
    assert found[0].upstream == "http://127.0.0.1:9/v1", "the pruned row is gone, the recent kept"
    now = datetime.now(UTC)
    assert found[0].live(now) and not found[1].live(now)
    line = snapshot(settings, store, PriceBook()).liveness()
    assert len(line) == 1 and line[0].startswith(f"scheduler pid {os.getpid()} on ")

    heartbeat.stop()
    assert [b.pid for b in beats(store)] == [4242]
