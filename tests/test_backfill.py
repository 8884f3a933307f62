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
    BudgetSpent,
    TickCompleted,
    TickScheduled,
    TickSkipped,
    TickStarted,
)
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.scheduling import slot_tick_id
from harness.scheduling.backfill import (
    Backfill,
    BackfillError,
    backfills,
    cancel_backfill,
    range_slots,
    request_backfill,
)
from harness.store import EventStore, open_store
from tests.commands import Output, forked, forked_cli, start_service, write_config
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


FORECAST_LEVELS = """
[prices."fake-model"]
input_per_mtok = 10.0
output_per_mtok = 30.0

[levels.hourly]
every = "1h"
prompt = "Anything new?"
model = "fake-model"
reserve_tokens = 5000

[levels.fresh]
every = "1h"
prompt = "Anything new?"
model = "fake-model"
reserve_tokens = 4000

[[budgets]]
name = "hourly-24h"
scope = "level:hourly"
window = "24h"
tokens = 13100
"""


def _ran(store: EventStore, level: str, tick_id: str, at: datetime, tokens: int) -> None:
    """A tick of `level` that ran at `at` and spent `tokens` prompt tokens."""
    events = [
        TickScheduled(tick_id=tick_id, level=level, slot=at, occurred_at=at),
        TickStarted(tick_id=tick_id, level=level, pid=1, host="h", occurred_at=at),
        BudgetSpent(
            tick_id=tick_id,
            level=level,
            model="fake-model",
            prompt_tokens=tokens,
            completion_tokens=0,
            occurred_at=at,
        ),
        TickCompleted(tick_id=tick_id, level=level, prompt_tokens=tokens, occurred_at=at),
    ]
    store.append(f"tick-{tick_id}", [event.to_record() for event in events])


def test_a_dry_run_forecasts_from_the_last_week_and_a_stop_budget_it_crosses_refuses_the_run(
    tmp_path: Path,
) -> None:
    """The forecast: the slots with no tick, the median tick of the last 7 days, the crossing.

    Ticks older than 7 days, skipped ones and other levels' do not move the median; a
    level without history is forecast at its reservation, and says so.
    """
    config = write_config(tmp_path, FORECAST_LEVELS)
    url = f"sqlite:///{tmp_path}/events.db"
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    start = end - timedelta(hours=10)
    now = datetime.now(UTC)
    store = open_store(url)
    _ran(store, "hourly", slot_tick_id("hourly", start), start + timedelta(minutes=1), 3000)
    for days, tokens in [(2, 1000), (3, 2000), (4, 6000), (9, 1_000_000)]:
        _ran(store, "hourly", f"old-{days}", now - timedelta(days=days), tokens)
    _ran(store, "other", "other-1", now - timedelta(days=1), 900_000)
    skipped = TickSkipped(tick_id="skipped-1", level="hourly", reason="budget")
    store.append("tick-skipped-1", [skipped.to_record()])
    store.close()
    env = {"TICKWORK_CONFIG": str(config)}
    span = ["--from", start.isoformat(), "--to", end.isoformat()]

    dry = forked(tmp_path, "backfill", "hourly", *span, "--dry-run", "--json", env=env)
    assert dry.returncode == 0, dry.stderr
    forecast = json.loads(dry.stdout)
    left = [start + timedelta(hours=i) for i in range(1, 10)]
    assert [datetime.fromisoformat(s) for s in forecast["slots"]] == left
    assert forecast["left_alone"] == 1
    tick = forecast["tick"]
    assert (tick["tokens"], tick["ticks"]) == (2500, 4), tick  # median of 1k, 2k, 3k, 6k
    assert tick["usd"] == pytest.approx(0.025)
    assert forecast["tokens"] == 9 * 2500 and forecast["usd"] == pytest.approx(9 * 0.025)
    (crossing,) = forecast["crossings"]
    # 13,100 - 3,000 spent in the 24 hours pays four ticks of 2,500: the fifth crosses.
    assert (crossing["budget"], crossing["action"], crossing["fits"]) == ("hourly-24h", "stop", 4)
    assert datetime.fromisoformat(crossing["slot"]) == left[4]
    assert crossing["spent_tokens"] == 3000
    assert forecast["refused_by"] == "hourly-24h"

    words, fresh = (
        forked(tmp_path, "backfill", level, *span, "--dry-run", env=env)
        for level in ("hourly", "fresh")
    )
    assert "crosses budget hourly-24h (stop" in words.stdout, words.stdout
    assert f"at slot {left[4]:%Y-%m-%d %H:%M:%S} UTC, after 4 slot(s)" in words.stdout
    assert "would be refused without --force" in words.stdout
    assert "10 slot(s) of fresh to run" in fresh.stdout, fresh.stdout
    assert "4,000 tokens" in fresh.stdout and "reservation" in fresh.stdout
    assert "crosses no budget" in fresh.stdout
    assert _backfills(url) == []

    refused = forked(tmp_path, "backfill", "hourly", *span, env=env)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "refused" in refused.stderr and "hourly-24h" in refused.stderr, refused.stderr
    assert _backfills(url) == []
    forced = forked(tmp_path, "backfill", "hourly", *span, "--force", env=env)
    assert forced.returncode == 0, forced.stderr
    assert [b.request.slots for b in _backfills(url)] == [10]


def _backfills(url: str) -> list[Backfill]:
    store = open_store(url)
    try:
        return list(backfills(store))
    finally:
        store.close()
