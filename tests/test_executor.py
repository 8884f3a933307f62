"""The executor seam and the shared timetable, through their public contracts.

A claimed tick handed to the local executor runs once, with a real worker against the
fake upstream; a cancel whose scope covers a queued tick ends it without starting it.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from harness.config import LevelConfig, RunnerConfig
from harness.contracts.events import TERMINAL_TYPES, utcnow
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.execution.executors import LocalExecutor
from harness.scheduling.timetable import Slot, Timetable
from harness.scheduling.triggers import level_trigger, next_slot
from harness.scheduling.waves import SlotClaim, claim_wave
from tests.tick_support import Harness
from tests.waiting import wait_until


def claimed(harness: Harness, tick_id: str) -> SlotClaim:
    claim = SlotClaim(tick_id, "min", None)
    assert claim_wave(harness.store, harness.settings, [claim]) == {tick_id}
    return claim


def kinds(harness: Harness, tick_id: str) -> list[str]:
    return [e.type for e in harness.store.read_stream(f"tick-{tick_id}")]


def test_a_submitted_tick_runs_once_and_ends_with_one_terminal_event(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    reports: list[str] = []
    executor = LocalExecutor(harness.settings, harness.preparer, harness.runner, reports.append)
    claim = claimed(harness, "min-submitted")
    fake.script(claim.tick_id, [Step(text="done")])
    executor.submit(claim)
    executor.wait_idle(60)
    executor.shutdown(grace=1)
    events = kinds(harness, claim.tick_id)
    assert events.count("TickScheduled") == events.count("TickStarted") == 1, events
    assert [t for t in events if t in TERMINAL_TYPES] == ["TickCompleted"], events
    [line] = reports
    assert line.startswith(f"{claim.tick_id} completed: ") and ' tokens, unpriced — "done"' in line


def test_cancel_by_scope_ends_a_queued_tick_cancelled_without_starting_it(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    one_place = RunnerConfig(max_concurrent=1, grace_seconds=1, retry_backoff_seconds=0.05)
    settings = harness.settings.model_copy(update={"runner": one_place})
    executor = LocalExecutor(settings, harness.preparer, harness.runner, lambda line: None)
    running, queued = claimed(harness, "min-running"), claimed(harness, "min-queued")
    fake.script(running.tick_id, [Step(text="slow", delay=60)])
    executor.submit(running)
    executor.submit(queued)
    wait_until(
        lambda: [ref.tick_id for ref in executor.running()] == [running.tick_id],
        "the first tick to start",
    )
    assert executor.gate.queued() == [queued]

    executor.cancel(lambda level, tick_id: tick_id == queued.tick_id, "scope min-queued")
    assert kinds(harness, queued.tick_id) == ["TickScheduled", "TickCancelled"]
    assert harness.store.read_stream(f"tick-{queued.tick_id}")[-1].data["reason"] == (
        "scope min-queued"
    )
    executor.cancel(lambda level, tick_id: level == "min", "scope min")
    executor.wait_idle(30)
    assert [t for t in kinds(harness, running.tick_id) if t in TERMINAL_TYPES] == ["TickCancelled"]
    assert "TickStarted" not in kinds(harness, queued.tick_id)
    executor.shutdown(grace=0)


def test_the_timetable_hands_due_slots_in_order_until_stopped() -> None:
    timetable = Timetable(
        {
            "fast": level_trigger(LevelConfig(every="1s")),
            "slow": level_trigger(LevelConfig(every="2s")),
        },
        utcnow(),
    )
    stopping = threading.Event()
    batches: list[tuple[datetime, list[Slot]]] = []

    def fire(due: list[Slot]) -> None:
        batches.append((utcnow(), due))
        if sum(len(d) for _, d in batches) >= 4:
            stopping.set()

    loop = threading.Thread(target=timetable.run, args=(stopping, fire), daemon=True)
    loop.start()
    loop.join(30)
    assert not loop.is_alive(), "the timetable did not stop on its event"
    slots = [slot for _, due in batches for slot in due]
    assert all(due == sorted(due) and max(due)[0] <= at for at, due in batches)
    fast = [slot for slot, name in slots if name == "fast"]
    assert fast == sorted(set(fast)) and {name for _, name in slots} == {"fast", "slow"}


def slots_of(schedule: str, day: str, zone: str = "Europe/Berlin") -> list[str]:
    """A schedule's slots from noon UTC before `day` to noon on it, UTC and wall-clock.

    Walked as the timetable walks them: every slot from the one before.
    """
    trigger = level_trigger(LevelConfig(schedule=schedule, timezone=zone))
    start = datetime.fromisoformat(f"{day}T12:00:00+00:00") - timedelta(days=1)
    slot, slots = next_slot(trigger, None, start), []
    while slot < start + timedelta(days=1):
        slots.append(f"{slot:%H:%MZ} {slot.astimezone(ZoneInfo(zone)):%H:%M%z}")
        slot = next_slot(trigger, slot, slot)
    return slots


def test_a_wall_clock_time_the_autumn_night_repeats_fires_once() -> None:
    assert slots_of("30 2 * * *", "2026-10-25") == ["00:30Z 02:30+0200"]
    assert slots_of("*/20 2 * * *", "2026-10-25") == [
        "00:00Z 02:00+0200",
        "00:20Z 02:20+0200",
        "00:40Z 02:40+0200",
    ]
    hourly = slots_of("0 * * * *", "2026-10-25")
    assert len(hourly) == 24, "a schedule of every hour fires every hour of elapsed time"
    assert hourly[12:14] == ["00:00Z 02:00+0200", "01:00Z 02:00+0100"]


def test_a_wall_clock_time_the_spring_night_skips_fires_once_when_the_clocks_jump() -> None:
    assert slots_of("30 2 * * *", "2026-03-29") == ["01:00Z 03:00+0200"]
    assert slots_of("*/20 2 * * *", "2026-03-29") == ["01:00Z 03:00+0200"]
    assert slots_of("30 2,3 * * *", "2026-03-29") == ["01:00Z 03:00+0200", "01:30Z 03:30+0200"]
    assert slots_of("30 2 * * *", "2026-03-30") == ["00:30Z 02:30+0200"]
    hourly = slots_of("0 * * * *", "2026-03-29")
    assert len(hourly) == 24 and hourly[12:14] == ["00:00Z 01:00+0100", "01:00Z 03:00+0200"]
