"""Backfill: a past range's slots run once each, whichever services claim them and however often.

Real `tickwork run` processes on one SQLite store, real ticks against the fake upstream.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.config import load_settings
from harness.contracts import (
    BACKFILL_STREAM,
    TERMINAL_TYPES,
    BackfillFinished,
    BackfillRequested,
    TickScheduled,
)
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.scheduling import slot_tick_id
from harness.scheduling.backfill import (
    BackfillError,
    backfills,
    cancel_backfill,
    range_slots,
    request_backfill,
)
from harness.store import open_store
from tests.commands import Output, forked_cli, start_service, write_config
from tests.waiting import wait_until

SLOTS = 4
LEVEL = """
[levels.hourly]
every = "1h"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = 60
"""


def _range() -> tuple[datetime, datetime]:
    """SLOTS hourly slots well in the past: the live timetable fires none of them."""
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    return end - timedelta(hours=SLOTS), end


def _claims(url: str) -> dict[str, list[dict[str, object]]]:
    """Each tick stream of the level: its events' types and data, in order."""
    store = open_store(url)
    streams: dict[str, list[dict[str, object]]] = {}
    for event in store.read_all(0, 100_000):
        if event.stream_id.startswith("tick-hourly-"):
            streams.setdefault(event.stream_id, []).append({"type": event.type, **event.data})
    store.close()
    return streams


def _finished(url: str, backfill_id: str) -> bool:
    store = open_store(url)
    try:
        return any(
            e.type == BackfillFinished.type and e.data["backfill_id"] == backfill_id
            for e in store.read_stream(BACKFILL_STREAM)
        )
    finally:
        store.close()


def _each_slot_once(url: str, backfill_id: str, start: datetime) -> Counter[int | None]:
    """Every slot of the range claimed once, by the backfill, ended once; claims per pid."""
    streams = _claims(url)
    slots = [start + timedelta(hours=i) for i in range(SLOTS)]
    pids: Counter[int | None] = Counter()
    for slot in slots:
        events = streams[f"tick-{slot_tick_id('hourly', slot)}"]
        scheduled = [e for e in events if e["type"] == TickScheduled.type]
        assert len(scheduled) == 1, events
        assert scheduled[0]["backfill"] == backfill_id
        assert sum(e["type"] in TERMINAL_TYPES for e in events) == 1, events
        pids[scheduled[0]["scheduler_pid"]] += 1  # type: ignore[index]
    return pids


def test_two_replicas_killed_mid_backfill_and_a_rerun_claim_every_slot_once(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    """Two replicas race for one range, both are SIGKILLed mid-way, a rerun finishes it.

    One scenario for three guarantees, to spend three service starts, not five: replicas
    that both run one range claim no slot twice (a slot's claim is its tick stream), a
    kill loses no slot, and a rerun claims only what is left.
    """
    config = write_config(tmp_path, LEVEL)
    url = f"sqlite:///{tmp_path}/events.db"
    start, end = _range()
    first = slot_tick_id("hourly", start)
    fake.script(first, [Step(text="slow", delay=3)])
    replicas = [Output(start_service(config, fake)) for _ in range(2)]
    for replica in replicas:
        replica.wait_for("tickwork running")
    asked = forked_cli(
        f"backfill hourly --from {start.isoformat()} --to {end.isoformat()} --max 2 "
        "--overlap allow",
        config,
        fake,
    )
    assert asked.returncode == 0, asked.stderr
    backfill_id = asked.stdout.split()[1].rstrip(":")
    assert f"{SLOTS} slot(s) of hourly" in asked.stdout
    wait_until(lambda: first in fake.state.first_request, "the first backfilled tick to run")
    for replica in replicas:
        replica.wait_for(f"backfill {backfill_id} of hourly: running")
        replica.process.send_signal(signal.SIGKILL)
    for replica in replicas:
        replica.process.wait()
    claimed_before = len(_claims(url))
    assert 1 <= claimed_before < SLOTS, "killed while the backfill was under way"

    rerun = Output(start_service(config, fake))
    wait_until(lambda: _finished(url, backfill_id), "the rerun to finish the backfill")
    output = rerun.stop()
    assert rerun.process.returncode == 0, output
    pids = _each_slot_once(url, backfill_id, start)
    assert set(pids) <= {r.process.pid for r in [*replicas, rerun]}
    assert sum(pids[r.process.pid] for r in replicas) == claimed_before
    assert pids[rerun.process.pid] == SLOTS - claimed_before, "the rerun claims what is left"
    status = forked_cli("status --json", config, fake)
    (shown,) = json.loads(status.stdout)["backfills"]
    assert (shown["state"], shown["claimed"], shown["in_flight"]) == ("finished", SLOTS, 0)


def test_a_bad_backfill_request_is_refused_and_records_nothing(tmp_path: Path) -> None:
    config = write_config(tmp_path, LEVEL)
    settings = load_settings(config)
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    start, end = _range()
    cases = [
        ("nope", start, end, "level: no level named 'nope'"),
        ("hourly", end, start, "to: "),
        ("hourly", start.replace(tzinfo=None), end, "from/to: give a time zone"),
        ("hourly", start, end + timedelta(days=30), "is in the future"),
        ("hourly", start - timedelta(days=500), end, "more than 10000 slots"),
    ]
    for level, begins, ends, message in cases:
        with pytest.raises(BackfillError, match=message):
            request_backfill(settings, store, level, begins, ends, by="test")
    with pytest.raises(BackfillError, match="no backfill named"):
        cancel_backfill(store, "bf-unknown", "test")
    assert store.read_stream(BACKFILL_STREAM) == []
    request = request_backfill(settings, store, "hourly", start, end, by="test")
    assert isinstance(request, BackfillRequested) and request.slots == SLOTS
    assert len(range_slots(settings, "hourly", start, end)) == SLOTS
    assert cancel_backfill(store, request.backfill_id, "test") == []
    assert [b.state for b in backfills(store)] == ["cancelled"]
    store.close()
