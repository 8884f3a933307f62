"""When levels fire: jitter, windows, exclusions, several specs, max_runs and catch-up.

Mostly timetable-level: the triggers and the timetable walked as the service walks them,
with no clock and no process. One service-level test runs real ticks for what needs the
store: missed slots after downtime, `max_runs` across a restart, and the digest's count.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import takewhile
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from harness.config import ConfigError, LevelConfig, Settings, load_settings
from harness.contracts.events import TickCompleted, TickScheduled, utcnow
from harness.devtools.fake_llm import FakeUpstream, Step
from harness.digests.build import build_digest
from harness.execution.executors import LocalExecutor
from harness.prices import PriceBook
from harness.projections import projector_for
from harness.scheduling import Service
from harness.scheduling.capacity import Capacity, level_rates, slots_a_minute
from harness.scheduling.describe import describe_levels
from harness.scheduling.jitter import FireTimes, jitter_delay
from harness.scheduling.timetable import Slot, Timetable
from harness.scheduling.triggers import (
    level_trigger,
    next_slot,
    slot_tick_id,
    upcoming_slot,
)
from harness.scheduling.triggers import slots_between as range_slots
from harness.store import open_store
from tests.commands import forked_cli, write_config
from tests.tick_support import Harness

BERLIN = ZoneInfo("Europe/Berlin")
SLOT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def level(**fields: object) -> LevelConfig:
    return LevelConfig(model="m", **fields)  # type: ignore[arg-type]


def slots_between(config: LevelConfig, start: str, end: str) -> list[str]:
    """The level's slots in [start, end) (UTC ISO), as wall-clock times in its zone."""
    trigger, zone = level_trigger(config), ZoneInfo(config.timezone)
    until = datetime.fromisoformat(end)
    slots, slot = [], upcoming_slot(trigger, datetime.fromisoformat(start))
    while slot is not None and slot < until:
        slots.append(f"{slot:%H:%MZ} {slot.astimezone(zone):%m-%d %H:%M%z}")
        slot = upcoming_slot(trigger, slot + timedelta(microseconds=1))
    return slots


# --- jitter ----------------------------------------------------------------------------

REPLICA = """
import json, sys
from datetime import datetime
from harness.scheduling.jitter import jitter_delay
pairs = json.load(sys.stdin)
delays = [jitter_delay(lv, datetime.fromisoformat(s), 60) for lv, s in pairs]
print(json.dumps([delay.total_seconds() for delay in delays]))
"""


def test_jitter_is_the_same_on_another_replica_and_lies_within_it() -> None:
    pairs = [(f"l{i}", (SLOT + timedelta(minutes=i)).isoformat()) for i in range(200)]
    here = [jitter_delay(lv, datetime.fromisoformat(s), 60).total_seconds() for lv, s in pairs]
    replica = subprocess.run(
        [sys.executable, "-c", REPLICA],
        input=json.dumps(pairs),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert json.loads(replica.stdout) == here, "another process (hash seed) computed others"
    assert all(0 <= delay < 60 for delay in here)
    assert len(set(here)) > 190, "delays barely vary"
    assert jitter_delay("l1", SLOT, 0) == timedelta(0)


def test_jitter_spreads_1000_levels_on_one_minute_over_the_minute() -> None:
    seconds = Counter(int(jitter_delay(f"l{i:04d}", SLOT, 60).total_seconds()) for i in range(1000))
    mean = 1000 / 60
    assert len(seconds) == 60 and max(seconds.values()) <= 3 * mean, seconds


def test_a_level_jitter_wins_over_the_global_one_and_0s_turns_it_off() -> None:
    settings = Settings(
        scheduling={"jitter": "30s"},  # type: ignore[arg-type]
        levels={
            "a": level(every="1m"),
            "b": level(every="1m", jitter="5m"),
            "c": level(every="1m", jitter="0s"),
        },
    )
    assert [settings.jitter_for(name) for name in "abc"] == [30, 300, 0]
    fires = FireTimes(settings)
    assert fires.fire_at("c", SLOT) == SLOT
    assert SLOT <= fires.fire_at("a", SLOT) < SLOT + timedelta(seconds=30)


def test_the_timetable_hands_the_unjittered_slot_once_its_jittered_time_has_come() -> None:
    settings = Settings(levels={"j": level(every="1s", jitter="1s")})
    fires = FireTimes(settings)
    timetable = Timetable(
        {"j": level_trigger(settings.levels["j"])}, utcnow(), fires.fire_at, fires.delays()
    )
    stopping, batches = threading.Event(), []

    def fire(due: list[Slot]) -> None:
        batches.append((utcnow(), due))
        if len(batches) == 3:
            stopping.set()

    timetable.run(stopping, fire, poll_seconds=0.05)
    for at, due in batches:
        for slot, name in due:
            assert slot.microsecond == 0, "the slot stays the un-jittered time"
            assert fires.fire_at(name, slot) <= at


# --- windows, exclusions, several specs ----------------------------------------------


def test_several_specs_fire_at_each_time_any_names_once() -> None:
    config = level(schedule=["0 * * * *", "*/30 * * * *"], every="45m")
    assert slots_between(config, "2026-12-01T00:00:00+00:00", "2026-12-01T02:00:00+00:00") == [
        "00:00Z 12-01 00:00+0000",
        "00:30Z 12-01 00:30+0000",
        "00:45Z 12-01 00:45+0000",
        "01:00Z 12-01 01:00+0000",
        "01:30Z 12-01 01:30+0000",
    ]


@pytest.mark.parametrize(
    ("weekdays", "days"),
    [
        ("1-5", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("0", ["Sun"]),
        ("7", ["Sun"]),
        ("0-3", ["Sun", "Mon", "Tue", "Wed"]),
        ("*/2", ["Sun", "Tue", "Thu", "Sat"]),
        ("5-7", ["Sun", "Fri", "Sat"]),
        ("mon-fri", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
    ],
)
def test_cron_weekday_numbers_mean_what_crontab_means(weekdays: str, days: list[str]) -> None:
    """APScheduler alone reads `1-5` from Monday as 0: Tuesday to Saturday."""
    config = level(schedule=f"0 9 * * {weekdays}", timezone="UTC")
    week = slots_between(config, "2026-12-06T00:00:00+00:00", "2026-12-13T00:00:00+00:00")
    fired = [
        datetime.strptime(f"2026-{slot.split()[1]}", "%Y-%m-%d").strftime("%a") for slot in week
    ]
    assert sorted(fired, key=["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"].index) == days


def test_a_window_bounds_the_slots_and_an_ended_schedule_leaves_the_timetable() -> None:
    config = level(every="1h", start_at="2026-12-01T02:00:00", end_at="2026-12-01T04:00:00")
    assert slots_between(config, "2026-11-30T00:00:00+00:00", "2026-12-02T00:00:00+00:00") == [
        "02:00Z 12-01 02:00+0000",
        "03:00Z 12-01 03:00+0000",
        "04:00Z 12-01 04:00+0000",
    ]
    trigger = level_trigger(config)
    assert upcoming_slot(trigger, datetime(2026, 12, 1, 4, 1, tzinfo=UTC)) is None
    whole_day = level(every="12h", timezone="Europe/Berlin", end_at="2026-12-01")
    assert slots_between(whole_day, "2026-12-01T00:00:00+00:00", "2026-12-03T00:00:00+00:00") == [
        "00:00Z 12-01 01:00+0100",
        "12:00Z 12-01 13:00+0100",
    ], "a date's end is the end of that day in the level's zone (23:00Z)"
    ended = Timetable({"over": trigger}, datetime(2026, 12, 2, tzinfo=UTC))
    assert ended.upcoming == {}


def test_exclusions_drop_dates_and_cron_times_in_the_levels_zone() -> None:
    holiday = level(schedule="30 0 * * *", timezone="Europe/Berlin", exclude=["2026-12-25"])
    assert slots_between(holiday, "2026-12-23T12:00:00+00:00", "2026-12-26T12:00:00+00:00") == [
        "23:30Z 12-24 00:30+0100",
        "23:30Z 12-26 00:30+0100",
    ], "the local 25th (from 23:00 UTC on the 24th) is excluded"
    weekends = level(every="12h", exclude=["* * * * sat,sun"])
    assert slots_between(weekends, "2026-12-04T00:00:00+00:00", "2026-12-08T00:00:00+00:00") == [
        "00:00Z 12-04 00:00+0000",
        "12:00Z 12-04 12:00+0000",
        "00:00Z 12-07 00:00+0000",
        "12:00Z 12-07 12:00+0000",
    ]


def test_exclude_and_windows_at_the_repeated_autumn_hour() -> None:
    night = ("2026-10-24T22:00:00+00:00", "2026-10-25T03:00:00+00:00")
    every_half_hour = {"schedule": "*/30 * * * *", "timezone": "Europe/Berlin"}
    assert slots_between(level(**every_half_hour, exclude=["* 2 * * *"]), *night)[3:] == [
        "23:30Z 10-25 01:30+0200",
        "02:00Z 10-25 03:00+0100",
        "02:30Z 10-25 03:30+0100",
    ], "both instants of 02:00 and 02:30 are excluded"
    # A window's end in the repeated hour means its first instant.
    ends = level(**every_half_hour, end_at="2026-10-25T02:30:00")
    assert slots_between(ends, *night)[-2:] == [
        "00:00Z 10-25 02:00+0200",
        "00:30Z 10-25 02:30+0200",
    ]


def test_exclude_and_windows_at_the_skipped_spring_hour() -> None:
    night = ("2026-03-28T22:00:00+00:00", "2026-03-29T03:00:00+00:00")
    daily = {"schedule": "30 2 * * *", "timezone": "Europe/Berlin"}
    assert slots_between(level(**daily), *night) == ["01:00Z 03-29 03:00+0200"]
    # The skipped 02:30 fires at the jump: matched at the time it fires, 03:00.
    assert slots_between(level(**daily, exclude=["0 3 * * *"]), *night) == []
    assert slots_between(level(**daily, exclude=["* 2 * * *"]), *night) == [
        "01:00Z 03-29 03:00+0200"
    ]
    # A window starting at a skipped time starts as far after the jump (PEP 495).
    starts = level(schedule="*/30 * * * *", timezone="Europe/Berlin", start_at="2026-03-29T02:30")
    assert slots_between(starts, *night)[:2] == [
        "01:30Z 03-29 03:30+0200",
        "02:00Z 03-29 04:00+0200",
    ]


# --- daylight saving: the rules an operator chooses ------------------------------------

AUTUMN = {
    # zone, cron naming a repeated time, the night: (first instant, second instant) in UTC
    "Europe/Berlin": ("30 2 * * *", "2026-10-25", ("00:30", "01:30")),
    "America/New_York": ("30 1 * * *", "2026-11-01", ("05:30", "06:30")),
}
SPRING = {
    # zone, cron naming a skipped time, the night, the instant the clocks jump (UTC)
    "Europe/Berlin": ("30 2 * * *", "2026-03-29", "01:00"),
    "America/New_York": ("30 2 * * *", "2026-03-08", "07:00"),
}


def night_slots(config: LevelConfig, day: str) -> list[str]:
    """The level's slots (UTC) from noon UTC before `day` to noon on it.

    Walked with `next_slot` as the timetable walks them: each from the one before, `now`
    given, no clock.
    """
    trigger = level_trigger(config)
    start = datetime.fromisoformat(f"{day}T12:00:00+00:00") - timedelta(days=1)
    slots, slot = [], next_slot(trigger, None, start)
    while slot < start + timedelta(days=1):
        slots.append(f"{slot:%H:%M}")
        slot = next_slot(trigger, slot, slot)
    return slots


@pytest.mark.parametrize("zone", sorted(AUTUMN))
@pytest.mark.parametrize("rule", ["first", "last", "both", "none"])
def test_the_repeated_autumn_time_fires_as_dst_repeated_says(zone: str, rule: str) -> None:
    cron, day, (first, second) = AUTUMN[zone]
    config = level(schedule=cron, timezone=zone, dst_repeated=rule)
    expected = {"first": [first], "last": [second], "both": [first, second], "none": []}[rule]
    assert night_slots(config, day) == expected
    # Asked between the two instants (a scheduler started then): only the second may come.
    between = datetime.fromisoformat(f"{day}T{first}:00+00:00") + timedelta(minutes=30)
    upcoming = next_slot(level_trigger(config), None, between)
    assert (f"{upcoming:%H:%M}" == second and upcoming.date() == between.date()) == (
        rule in ("last", "both")
    )
    if rule == "both":
        slots = [datetime.fromisoformat(f"{day}T{t}:00+00:00") for t in (first, second)]
        assert len({slot_tick_id("nightly", slot) for slot in slots}) == 2


@pytest.mark.parametrize("zone", sorted(SPRING))
@pytest.mark.parametrize("rule", ["shift", "skip"])
def test_the_skipped_spring_time_fires_as_dst_skipped_says(zone: str, rule: str) -> None:
    cron, day, jump = SPRING[zone]
    config = level(schedule=cron, timezone=zone, dst_skipped=rule)
    assert night_slots(config, day) == ([jump] if rule == "shift" else [])
    # A real time after the gap fires either way; `shift` adds the skipped one at the jump.
    both = level(schedule="30 2,3 * * *", timezone=zone, dst_skipped=rule)
    real = f"{datetime.fromisoformat(f'{day}T{jump}:00') + timedelta(minutes=30):%H:%M}"
    assert night_slots(both, day) == ([jump, real] if rule == "shift" else [real])


@pytest.mark.parametrize(
    "cron", ["* * * * *", "*/7 * * * *", "5,10-12,59 1-3 * * *", "*/20 2 * * 0", "45 * * * *"]
)
def test_a_range_of_slots_is_the_slots_next_slot_steps_to_across_both_dst_nights(
    cron: str,
) -> None:
    """`slots_between` fills an hour's minutes in without the trigger: never another slot."""
    for zone, (day, repeated, skipped) in {
        "Europe/Berlin": ("2026-10-25", "both", "shift"),
        "America/New_York": ("2026-03-08", "none", "skip"),
    }.items():
        for rules in ({}, {"dst_repeated": repeated, "dst_skipped": skipped}):
            trigger = level_trigger(level(schedule=cron, timezone=zone, **rules))
            start = datetime.fromisoformat(f"{day}T00:00:00+00:00") - timedelta(hours=3)
            end = start + timedelta(hours=10)
            stepped, slot = [], next_slot(trigger, None, start)
            while slot < end:
                stepped.append(slot)
                slot = next_slot(trigger, slot, slot)
            assert range_slots(trigger, start, end, 10_000) == stepped, (zone, rules)
            assert range_slots(trigger, start, end, 7) == stepped[:7]


@pytest.mark.parametrize("rule", ["first", "last", "both", "none"])
def test_a_schedule_of_every_hour_fires_every_elapsed_hour_whatever_the_rule(rule: str) -> None:
    hourly = night_slots(
        level(schedule="0 * * * *", timezone="Europe/Berlin", dst_repeated=rule), "2026-10-25"
    )
    assert hourly == [f"{hour % 24:02d}:00" for hour in range(12, 36)], "24 UTC hours, 24 slots"


def test_the_scheduling_default_applies_where_a_level_sets_no_rule(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        '[scheduling]\ndst_repeated = "both"\ndst_skipped = "skip"\n'
        '[levels.nightly]\nschedule = "30 2 * * *"\ntimezone = "Europe/Berlin"\nmodel = "m"\n'
        '[levels.own]\nschedule = "30 2 * * *"\ntimezone = "Europe/Berlin"\nmodel = "m"\n'
        'dst_repeated = "last"\ndst_skipped = "shift"\n',
    )
    settings = load_settings(config)
    nightly, own = settings.levels["nightly"], settings.levels["own"]
    assert night_slots(nightly, "2026-10-25") == ["00:30", "01:30"]
    assert night_slots(nightly, "2026-03-29") == []
    assert night_slots(own, "2026-10-25") == ["01:30"]
    assert night_slots(own, "2026-03-29") == ["01:00"]


@pytest.mark.parametrize(
    ("zone", "now", "kind", "rule", "slots"),
    [
        ("Europe/Berlin", "2026-10-20", "repeated", "both", ["00:30", "01:30"]),
        ("America/New_York", "2026-10-20", "repeated", "last", ["06:30"]),
        ("Europe/Berlin", "2026-03-20", "skipped", "shift", ["01:00"]),
        ("America/New_York", "2026-03-01", "skipped", "skip", []),
    ],
)
def test_levels_shows_the_next_transition_and_the_slots_the_level_fires_in_it(
    tmp_path: Path, zone: str, now: str, kind: str, rule: str, slots: list[str]
) -> None:
    cron = AUTUMN[zone][0] if kind == "repeated" else SPRING[zone][0]
    key = "dst_repeated" if kind == "repeated" else "dst_skipped"
    # One spec, and several joined with a window (a `LevelSchedule`): the same rule, slots.
    joined = [cron, "0 12 * * sat"]
    settings = Settings(
        store={"url": f"sqlite:///{tmp_path}/events.db"},  # type: ignore[arg-type]
        levels={
            "nightly": level(schedule=cron, timezone=zone, **{key: rule}),
            "joined": level(schedule=joined, timezone=zone, end_at="2099-01-01", **{key: rule}),
        },
    )
    store = open_store(settings.store.url)
    described = describe_levels(
        settings, store, ["nightly", "joined"], datetime.fromisoformat(f"{now}T00:00:00+00:00")
    )
    store.close()
    day = (AUTUMN if kind == "repeated" else SPRING)[zone][1]
    for each in described:
        dst = each.dst
        assert dst is not None and (dst.kind, dst.rule) == (kind, rule), each.name
        assert f"{dst.at:%Y-%m-%d}" == day and dst.wall_to - dst.wall_from == timedelta(hours=1)
        assert [f"{slot:%H:%M}" for slot in dst.slots] == slots
        assert all(f"{slot:%Y-%m-%d}" == day for slot in dst.slots)


def test_tickwork_levels_names_the_next_dst_change_and_its_rule(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    config = write_config(
        tmp_path,
        '[levels.nightly]\nschedule = "30 2 * * *"\ntimezone = "Europe/Berlin"\n'
        'model = "fake-model"\ndst_repeated = "both"\ndst_skipped = "skip"\n'
        '[levels.often]\nevery = "1h"\nmodel = "fake-model"\n',
    )
    shown = forked_cli("levels", config, fake)
    assert shown.returncode == 0, shown.stderr
    assert "next DST change:" in shown.stdout and (
        "(dst_repeated = both)" in shown.stdout or "(dst_skipped = skip)" in shown.stdout
    ), shown.stdout
    assert shown.stdout.count("next DST change:") == 1, "an interval knows no DST"


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('every = "1m"\nexclude = ["2026-13-01"]', "levels.min.exclude: exclude[0]:"),
        ('every = "1m"\nexclude = ["* * * *"]', "neither a date (2026-12-25) nor a cron"),
        ('every = "1m"\njitter = "soon"', "levels.min.jitter: 'soon' is not an"),
        ('schedule = ["* * * * *", "61 * * * *"]', "levels.min.schedule: schedule[1]"),
        ('every = "1m"\nstart_at = 2026-12-02\nend_at = 2026-12-01', "'end_at' is before"),
        ('every = "1m"\nmax_runs = 0', "levels.min.max_runs"),
        ("schedule = []", "an empty list of cron expressions never fires"),
        (
            'every = "1m"\ndst_repeated = "twice"',
            "levels.min.dst_repeated: must be 'first'",
        ),
        ('every = "1m"\ndst_skipped = "later"', "levels.min.dst_skipped: must be 'shift'"),
    ],
)
def test_a_bad_schedule_is_refused_with_its_key_path(
    tmp_path: Path, extra: str, expected: str
) -> None:
    config = tmp_path / "tickwork.toml"
    config.write_text(f'[levels.min]\nmodel = "m"\n{extra}\n')
    with pytest.raises(
        ConfigError,
        match=expected.replace("(", r"\(")
        .replace(")", r"\)")
        .replace("[", r"\[")
        .replace("]", r"\]")
        .replace("*", r"\*"),
    ):
        load_settings(config)


# --- the service: missed slots, max_runs, the digest ---------------------------------


def test_missed_slots_follow_catch_up_max_runs_survives_a_restart_and_the_digest_counts(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(
        tmp_path, fake, rag=False, every="1m", jitter="20s", catch_up_seconds=3600, max_runs=2
    )
    settings, store = harness.settings, harness.store
    fake.script("default", [Step(text="done")])

    def service() -> Service:
        executor = LocalExecutor(settings, harness.preparer, harness.runner, lambda line: None)
        return Service(settings, store, executor, lambda line: None)

    now = utcnow().replace(second=0, microsecond=0)
    first = now - timedelta(minutes=5)  # ran before the service went down
    ran = TickScheduled(tick_id=slot_tick_id("min", first), level="min", slot=first)
    ended = TickCompleted(tick_id=ran.tick_id, level="min")
    store.append(ran.stream_id, [ran.to_record(), ended.to_record()])
    catching_up = service()
    catching_up.catch_up(now)  # down since then: 3 missed, the latest within catch-up runs
    catching_up.wait_idle(60)
    restarted = service()
    restarted.fire([(now, "min")])  # max_runs (2) spent: not a slot any more
    restarted.wait_idle(60)
    for each in (catching_up, restarted):
        each.executor.shutdown(grace=1)
    ends = {}
    for minutes in range(5, -1, -1):
        slot = now - timedelta(minutes=minutes)
        events = store.read_stream(f"tick-{slot_tick_id('min', slot)}")
        ends[minutes] = [e.data.get("reason") or e.type for e in events[-1:]]
        if events and minutes < 5:
            scheduled = events[0].data
            fire_at = datetime.fromisoformat(scheduled["fire_at"])
            assert fire_at - slot == jitter_delay("min", slot, 20), "fire time from (level, slot)"
    assert ends == {
        5: ["TickCompleted"],
        4: ["missed"],
        3: ["missed"],
        2: ["missed"],
        1: ["TickCompleted"],
        0: [],
    }, ends
    prices = PriceBook(settings.prices)
    digest = build_digest(
        store,
        projector_for(store, prices),
        prices,
        "ops",
        now - timedelta(hours=1),
        now + timedelta(hours=1),
        ["min"],
        40,
    )
    [section] = digest.levels
    assert section.skipped == {"missed": 3}
    store.close()


@pytest.mark.parametrize("down", ["restart", "store outage"])
def test_a_catch_up_that_fits_the_budget_runs_the_newest_missed_slots_it_can_pay_for(
    tmp_path: Path, fake: FakeUpstream, down: str
) -> None:
    """`catch_up_budget = "fit"`: 2,500 tokens a day pay two ticks of a 1,000 reservation.

    Of four slots missed within catch-up (while no scheduler ran, or owed while the store
    was out), the newest two run and the older two are skipped `budget_forecast`; one log
    line says how many and why.
    """
    harness = Harness(
        tmp_path,
        fake,
        rag=False,
        every="1m",
        catch_up_seconds=3600,
        catch_up_budget="fit",
        overlap="allow",
        reserve_tokens=1000,
        daily_token_budget=2500,
    )
    settings, store = harness.settings, harness.store
    fake.script("default", [Step(text="done")])
    lines: list[str] = []
    executor = LocalExecutor(settings, harness.preparer, harness.runner, lambda line: None)
    service = Service(settings, store, executor, lines.append)
    now = utcnow().replace(second=0, microsecond=0)
    first = now - timedelta(minutes=5)  # ran before the service went down
    ran = TickScheduled(tick_id=slot_tick_id("min", first), level="min", slot=first)
    ended = TickCompleted(tick_id=ran.tick_id, level="min")
    store.append(ran.stream_id, [ran.to_record(), ended.to_record()])
    if down == "restart":
        service.catch_up(now)
    else:  # as `Service.fire` leaves a wave whose claim failed; the wake-up settles it
        service.owed.owe([(now - timedelta(minutes=minutes), "min") for minutes in (4, 3, 2, 1)])
        service._wake()
    service.wait_idle(60)
    executor.shutdown(grace=1)
    ends = {}
    for minutes in range(4, 0, -1):
        events = store.read_stream(f"tick-{slot_tick_id('min', now - timedelta(minutes=minutes))}")
        ends[minutes] = [e.data.get("reason") or e.type for e in events[-1:]]
    assert ends == {
        4: ["budget_forecast"],
        3: ["budget_forecast"],
        2: ["TickCompleted"],
        1: ["TickCompleted"],
    }, ends
    (line,) = [line for line in lines if "budget_forecast" in line]
    assert "4 within catch-up; 2 run now, newest first, 2 skipped (budget_forecast)" in line
    assert "budget level-min-daily" in line and "reservation" in line, line
    store.close()


def test_levels_describes_schedule_next_fires_last_runs_and_the_pause_note(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    config = write_config(
        tmp_path,
        '[scheduling]\njitter = "30s"\n'
        '[levels.min]\nschedule = ["0 9 * * mon-fri", "30 12 * * sat"]\n'
        'timezone = "Europe/Berlin"\nprompt = "Hi"\nmodel = "fake-model"\nmax_runs = 10\n'
        '[levels.hour]\nevery = "1h"\njitter = "0s"\nprompt = "Hi"\nmodel = "fake-model"\n',
    )
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    ran = TickScheduled(tick_id="hour-ran", level="hour", slot=utcnow().replace(microsecond=0))
    done = TickCompleted(tick_id="hour-ran", level="hour")
    store.append(ran.stream_id, [ran.to_record(), done.to_record()])
    store.close()
    paused = forked_cli("pause min --reason maintenance --note ask-bob", config, fake)
    assert paused.returncode == 0, paused.stderr
    shown = forked_cli("levels --json", config, fake)
    assert shown.returncode == 0, shown.stderr
    minute, hour = json.loads(shown.stdout)
    assert minute["words"].startswith("at 09:00 on mon-fri and at 12:30 on sat (Europe/Berlin)")
    assert minute["paused"]["reason"] == "maintenance" and minute["paused"]["note"] == "ask-bob"
    assert minute["runs"] == 0 and minute["max_runs"] == 10 and minute["recent"] == []
    fires = [
        (datetime.fromisoformat(f["slot"]), datetime.fromisoformat(f["fires_at"]))
        for f in minute["next"]
    ]
    assert len(fires) == 5 and all(
        timedelta(0) <= at - slot < timedelta(seconds=30) for slot, at in fires
    )
    assert all(slot.astimezone(BERLIN).strftime("%H:%M") in ("09:00", "12:30") for slot, _ in fires)
    assert [f["fires_at_local"][-6:] for f in minute["next"]] == ["+01:00"] * 5
    assert [run["status"] for run in hour["recent"]] == ["completed"] and hour["paused"] is None
    assert [datetime.fromisoformat(f["fires_at"]).minute for f in hour["next"]] == [0] * 5
    text = forked_cli("levels min", config, fake)
    assert "paused since" in text.stdout and "maintenance (note: ask-bob)" in text.stdout
    assert "runs: 0 of at most 10" in text.stdout and "hour:" not in text.stdout
    assert "next fire times (Europe/Berlin / UTC):" in text.stdout
    in_utc = forked_cli("levels hour", config, fake).stdout
    assert "next fire times (UTC):" in in_utc and "UTC / UTC" not in in_utc
    after = in_utc.split("next fire times (UTC):\n")[1].splitlines()
    fire_lines = list(takewhile(lambda line: line.startswith("    "), after))
    assert len(fire_lines) == 5 and all(" / " not in line for line in fire_lines)
    unknown = forked_cli("levels nope", config, fake)
    assert unknown.returncode == 2 and "no level named 'nope'" in unknown.stderr


def test_demand_is_each_schedules_slots_a_minute_read_from_its_fields() -> None:
    """What a day of fire times would count, without walking them: 1,000 levels at once."""
    cases = {
        "every 5s": (LevelConfig(every="5s", model="m"), 12.0),
        "every minute": (LevelConfig(schedule="* * * * *", model="m"), 1.0),
        "*/5 in Berlin": (LevelConfig(schedule="*/5 * * * *", timezone="Europe/Berlin"), 0.2),
        "office hours": (LevelConfig(schedule="0,30 9-17 * * 1-5", model="m"), 18 / 1440),
        "both": (LevelConfig(schedule=["0 * * * *"], every="30m", model="m"), 3 / 60),
    }
    for name, (config, expected) in cases.items():
        assert slots_a_minute(config) == pytest.approx(expected), name
        if config.crons and not config.every:
            start = datetime(2026, 12, 7, tzinfo=UTC)  # a Monday
            trigger, slots, day = level_trigger(config), 0, start + timedelta(days=1)
            fire = next_slot(trigger, None, start)
            while fire < day:
                slots, fire = slots + 1, next_slot(trigger, fire, fire)
            assert slots / 1440 == pytest.approx(expected), f"{name}: a Monday's fire times"
    levels = {
        f"l{n:04d}": LevelConfig(schedule=f"{n % 60} */{1 + n % 5} * * *", model="m")
        for n in range(1000)
    }
    levels["ended"] = LevelConfig(every="1s", model="m", end_at=datetime(2026, 1, 1, tzinfo=UTC))
    rates = level_rates(levels, left_out={"l0000"})
    assert len(rates) == 999, "a level left out (paused) and one whose schedule ended ask none"
    hours = sum(math.ceil(24 / (1 + n % 5)) for n in range(1, 1000))  # `*/k`: ceil(24 / k)
    assert sum(rates.values()) == pytest.approx(hours / 1440), "one minute an hour each"


def test_capacity_names_what_caps_the_starts_first() -> None:
    """The spacing caps 60 levels every 5 s; unspaced, places at the recent run time do."""
    spaced = Capacity(demand=720, levels=60, spacing_seconds=0.25, places=4, run_seconds=0.5)
    assert (spaced.by_spacing, spaced.by_places) == (240, 480)
    assert spaced.words() == (
        "demand 720 slots a minute (60 level(s)); the start spacing (0.25 s) allows 240 starts "
        "a minute; 4 places allow about 480 a minute at 0.5 s a tick"
    )
    assert spaced.warning() is not None and "than the start spacing (0.25 s) allows (240 a " in (
        spaced.warning() or ""
    )
    unspaced = Capacity(demand=720, levels=60, spacing_seconds=0, places=4, run_seconds=2.0)
    assert "than 4 places at 2.0 s a tick allows (120 a minute)" in (unspaced.warning() or "")
    assert Capacity(100, 60, 0.25, 4, None).warning() is None
    workers = Capacity(demand=720, levels=60, spacing_seconds=0, places=None)
    assert workers.warning() is None and workers.words().endswith(
        "starts are not spaced; the workers' places run them"
    )
