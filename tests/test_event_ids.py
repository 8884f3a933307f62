"""Event ids are time-ordered UUIDs (version 7) and stay unique across forked processes.

Tick ids are written in one format and the day they name is read back from it.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, date, datetime, timedelta, timezone

from harness.contracts import BudgetSpent, new_event_id
from harness.contracts.ids import tick_id_day
from harness.execution.prepare import new_tick_id
from harness.scheduling.triggers import slot_tick_id
from harness.scheduling.waves import SlotClaim
from tests.waiting import wait_until

IDS_PER_PROCESS = 2000


def _millisecond() -> int:
    return time.time_ns() // 1_000_000


def _next_millisecond() -> None:
    """Return once the clock has moved past the millisecond it was in."""
    now = _millisecond()
    wait_until(lambda: _millisecond() > now, "the next millisecond", interval=0.0005)


def test_an_id_is_a_version_7_rfc_uuid_stamped_with_the_millisecond_it_was_minted() -> None:
    before = _millisecond()
    minted = new_event_id()
    after = _millisecond()
    assert isinstance(minted, uuid.UUID)
    assert minted.version == 7
    assert minted.variant == uuid.RFC_4122
    assert before <= minted.int >> 80 <= after


def test_ids_minted_later_sort_after_earlier_ones_as_uuids_and_as_stored_hex() -> None:
    minted = []
    for _ in range(5):
        minted.append(new_event_id())
        _next_millisecond()
    assert sorted(minted) == minted
    assert sorted(i.hex for i in minted) == [i.hex for i in minted]


def test_ids_minted_within_one_millisecond_are_distinct_and_in_order() -> None:
    burst = [new_event_id() for _ in range(10_000)]
    assert len(set(burst)) == len(burst)
    assert sorted(burst) == burst


def test_events_and_claims_are_minted_time_ordered_ids() -> None:
    spent = BudgetSpent(tick_id="t", level="min", model="m", prompt_tokens=1, completion_tokens=1)
    claim = SlotClaim(tick_id="t", level="min", slot=datetime(2026, 11, 30))
    assert spent.event_id.version == 7
    assert claim.claim_id.version == 7


def _mint_in_children(children: int) -> tuple[list[uuid.UUID], list[list[uuid.UUID]]]:
    """Fork `children` real processes that each mint ids; the parent mints as many after."""
    readers = []
    for _ in range(children):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: mint, report, leave without running the parent's cleanup
            try:
                os.close(read)
                text = "\n".join(new_event_id().hex for _ in range(IDS_PER_PROCESS))
                with os.fdopen(write, "w") as pipe:
                    pipe.write(text)
            finally:
                os._exit(0)
        os.close(write)
        readers.append((pid, read))
    parent = [new_event_id() for _ in range(IDS_PER_PROCESS)]
    minted = []
    for pid, read in readers:
        with os.fdopen(read) as pipe:
            minted.append([uuid.UUID(line) for line in pipe.read().splitlines()])
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    return parent, minted


def test_forked_children_mint_ids_of_their_own() -> None:
    """Warm ticks are forked from one fork server: a child must not replay its parent's ids.

    The random bits (the last 8 bytes, past the timestamp and the in-millisecond counter)
    of a generator that was not reseeded repeat in every process forked from it, whatever
    millisecond each one mints in; reseeded, no two processes share any.
    """
    new_event_id()  # the generator's state exists before the fork, as in a fork server
    parent, children = _mint_in_children(4)
    every = [parent, *children]
    assert all(len(ids) == IDS_PER_PROCESS for ids in every)
    assert len({i for ids in every for i in ids}) == len(every) * IDS_PER_PROCESS
    tails = [{i.bytes[8:] for i in ids} for ids in every]
    for index, mine in enumerate(tails):
        for other in tails[index + 1 :]:
            assert not mine & other


def test_a_tick_id_names_its_utc_second_and_its_day_is_read_back() -> None:
    """Its spelling must never change: a slot's id is its claim, archives are found by it."""
    slot = datetime(2026, 12, 2, 8, 30, tzinfo=timezone(timedelta(hours=9)))
    assert slot_tick_id("nightly-build", slot) == "nightly-build-20261201T233000Z"
    assert tick_id_day("nightly-build-20261201T233000Z") == date(2026, 12, 1)
    before = datetime.now(UTC).replace(microsecond=0)
    started = new_tick_id("min")
    level, stamp, unique = started.split("-")
    at = datetime.strptime(stamp, "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    assert level == "min" and before <= at <= datetime.now(UTC) and len(unique) == 8
    assert tick_id_day(started) == at.date()
    for other in ("t1", "min-20261301T000000Z", "min-20261201T000000Z-extra", "min-202612011200-3"):
        assert tick_id_day(other) is None, other
