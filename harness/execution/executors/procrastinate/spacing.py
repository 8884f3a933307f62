"""The infrastructure throttle shared by every worker, through the store."""

from __future__ import annotations

import threading
from datetime import timedelta

from harness.contracts import THROTTLE_STREAM, StartsSpaced, utcnow
from harness.store import (
    NO_STREAM,
    ConcurrencyError,
    EventStore,
)


class SharedSpacing:
    """The infrastructure throttle (`[runner] infra_throttle_seconds`) across workers.

    Under the local executor one gate spaces every start after an infrastructure failure;
    a worker's queue is procrastinate's, and a throttle of its own would space one process
    of many. Here a failure on any worker spaces the starts of every worker by its
    backoff, for `infra_throttle_seconds`, through the `throttle` stream's last
    `StartsSpaced` (spacing, end, last start), appended at the version read.
    """

    def __init__(self, store: EventStore, duration: float) -> None:
        self.store = store
        self.duration = timedelta(seconds=duration)

    def failed(self, spacing: float) -> None:
        """An attempt failed on infrastructure: every start waits `spacing` from now on.

        A wider spacing or a later end in force is kept, as the local gate keeps it.
        """
        while True:
            version, state = self._read()
            now = utcnow()
            held = state if state is not None and state.until > now else None
            widened = StartsSpaced(
                spacing_seconds=max(spacing, held.spacing_seconds if held else 0.0),
                until=max(now + self.duration, held.until if held else now),
                last_start=max(now, held.last_start if held else now),
            )
            if self._append(widened, version):
                return

    def wait_turn(self, tick_id: str, closing: threading.Event) -> bool:
        """Wait until the tick may start here; False when `closing` is set first."""
        while True:
            version, state = self._read()
            now = utcnow()
            if state is None or state.until <= now:
                return True
            pause = (state.last_start - now).total_seconds() + state.spacing_seconds
            if pause > 0:
                if closing.wait(min(pause, (state.until - now).total_seconds())):
                    return False
                continue
            started = StartsSpaced(
                spacing_seconds=state.spacing_seconds,
                until=state.until,
                last_start=now,
                tick_id=tick_id,
            )
            if self._append(started, version):
                return True

    def _read(self) -> tuple[int, StartsSpaced | None]:
        version = self.store.stream_version(THROTTLE_STREAM)
        if not version:
            return 0, None
        last = self.store.read_stream(THROTTLE_STREAM, after=version - 1)[-1]
        return last.stream_position, StartsSpaced.model_validate(last.data)

    def _append(self, state: StartsSpaced, version: int) -> bool:
        """Append at `version`; False when another worker appended first."""
        try:
            self.store.append(THROTTLE_STREAM, [state.to_record()], version or NO_STREAM)
        except ConcurrencyError:
            return False
        return True
