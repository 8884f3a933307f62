"""The stall hedge: an attempt with no result after a while gets one twin tick beside it.

The predecessor call layer's rule: when an attempt has run `max(H, timeout / 2)` without
a result (H is the level's `hedge_after_seconds`; 0 is off), exactly one twin starts,
with the tick id plus `-h` and the same payload. The twin is a tick of its own: its own
stream (claimed with the level's reservation, so it counts against the budget), its own
process group and spend, a place under the caps. The first valid result wins and the
other is cancelled at once (`TickCancelled`, reason `hedge_lost`); when neither gives
one, both keep their ends and result files for diagnosis and the tick's own retries go
on. `HedgeStarted` and `HedgeDecided` on the tick's stream say what happened.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Literal, Protocol

from harness.config import LevelConfig
from harness.contracts import HedgeDecided, HedgeStarted, TickCancelled, TickCompleted
from harness.execution.launchers import TickProcess
from harness.execution.lifecycle import Life
from harness.execution.prepare import PreparedTick
from harness.scheduling import SlotClaim

if TYPE_CHECKING:
    from harness.execution.runner import Ended, Runner

TWIN_SUFFIX = "-h"
HEDGE_LOST = "hedge_lost"

Side = Literal["original", "twin"]


class Places(Protocol):
    """Where a twin takes its place under the caps: the executor's queue."""

    def enter(self, level: str, stopped: threading.Event) -> bool:
        """Take a place for `level` when the caps allow; False when stopped or closed."""

    def release(self, level: str) -> None:
        """Give the place back."""


def hedge_after(level: LevelConfig | None, timeout: float) -> float | None:
    """How long an attempt runs without a result before its twin starts; None: no hedge."""
    if level is None or level.hedge_after_seconds <= 0:
        return None
    return max(level.hedge_after_seconds, timeout / 2)


def twin_of(tick: PreparedTick) -> PreparedTick:
    """The same payload under the twin's tick id, result file and log."""
    return tick.sibling(tick.payload.tick_id + TWIN_SUFFIX)


class Race:
    """One hedged attempt and its twin: the first valid result claims the win."""

    def __init__(self, runner: Runner, tick: PreparedTick, life: Life) -> None:
        self.runner = runner
        self.tick = tick
        self.life = life
        self.twin = twin_of(tick)
        self.twin_life = Life(self.twin.ref, life.forced, may_hedge=False)
        self.twin_ended: Ended | None = None
        self.winner: Side | None = None
        self._lock = threading.Lock()

    def claim(self, side: Side, ended: Ended) -> bool:
        """Whether `side`'s end is the race's valid result (the first one is)."""
        if not isinstance(ended.event, TickCompleted):
            return False
        with self._lock:
            if self.winner is None:
                self.winner = side
                return True
            return False

    def run(self, process: TickProcess, threshold: float) -> Ended:
        """Watch the attempt to its end, starting the twin after `threshold` seconds."""
        runner, tick, life = self.runner, self.tick, self.life
        started = time.monotonic()
        if process.wait(threshold) is not None or life.reason is not None:
            return runner.await_end(life, process, tick.timeout - (time.monotonic() - started))
        life.may_hedge = False
        ref = tick.ref
        runner.record(
            HedgeStarted(
                tick_id=ref.tick_id,
                level=ref.level,
                twin_id=self.twin.ref.tick_id,
                after_seconds=threshold,
            )
        )
        runner.enlist(self.twin_life)
        twin = threading.Thread(target=self._run_twin, name=self.twin.ref.tick_id, daemon=True)
        twin.start()
        ended = runner.await_end(life, process, tick.timeout - (time.monotonic() - started))
        if self.claim("original", ended):
            runner.cancel(self.twin.ref.tick_id, HEDGE_LOST)
        elif isinstance(ended.event, TickCancelled) and ended.event.reason != HEDGE_LOST:
            runner.cancel(self.twin.ref.tick_id, ended.event.reason)
        twin.join()
        life.hedge_won = self.winner == "twin"
        runner.record(
            HedgeDecided(
                tick_id=ref.tick_id,
                level=ref.level,
                twin_id=self.twin.ref.tick_id,
                winner=self.winner,
            )
        )
        return ended

    def _run_twin(self) -> None:
        runner, twin, life = self.runner, self.twin, self.twin_life
        payload = twin.payload
        level = twin.config or runner.settings.levels.get(payload.level)
        claim = SlotClaim(
            payload.tick_id,
            payload.level,
            twin.slot,
            reserved_tokens=level.reserve_tokens if level and payload.budget is not None else 0,
            routed=twin.routed,
        )
        try:
            runner.record(claim.scheduled(payload.model))
            places = runner.places
            if places is not None and not places.enter(payload.level, life.stopped):
                reason = life.reason or "service stopped before the twin could start"
                ended = runner.ended_cancelled(life, reason)
            else:
                try:
                    ended = runner.attempt(twin, 1, life)
                finally:
                    if places is not None:
                        places.release(payload.level)
            if self.claim("twin", ended):
                runner.cancel(self.tick.ref.tick_id, HEDGE_LOST)
            runner.record(ended.event)
            self.twin_ended = ended
        finally:
            runner.dismiss(life)
