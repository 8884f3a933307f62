"""What other processes did on this store, told in the service's log as it is recorded.

A tick started by hand (`tickwork tick`, the dashboard's buttons) runs in a process of
its own, a tick of the procrastinate executor in a `tickwork worker`, and a pause,
resume, cancel, backfill or budget action is recorded by whichever process decided it
(a tick's runner that paused its level, the CLI, the API, a replica's budget watch): the
service that an operator watches saw none of them. This follows the log's terminal and
state events and prints the line of each manual or worker's tick that ended, as the
executor prints the service's own, and of each state change (`state_lines`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from harness.contracts import TERMINAL_TYPES, TickTaken, decode, tick_stream
from harness.prices import PriceBook
from harness.projections import tick_line
from harness.scheduling.state_lines import STATE_TYPES, state_line
from harness.store import EventStore, StoredEvent

BATCH = 1000
TYPES = TERMINAL_TYPES | STATE_TYPES
TAKEN = TickTaken.type
"""In a tick's stream: a `tickwork worker` ran it, and told only its own log."""


class LogFeed:
    """Reads the terminal and state events appended since it last looked; reports their lines."""

    def __init__(
        self,
        store: EventStore,
        prices: PriceBook,
        report: Callable[[str], None],
        levels: Callable[[], Collection[str]] = tuple,
        workers: bool = False,
    ) -> None:
        """Follows the log from its end.

        `levels`: the levels configured now (a reload changes them); `workers`: the
        service's ticks run in `tickwork worker`s (procrastinate), whose lines it prints.
        """
        self.store = store
        self.prices = prices
        self.report = report
        self.levels = levels
        self.workers = workers
        self.after = store.last_position()

    def poll(self) -> None:
        """Report the manual and workers' ticks that ended and the state changes since.

        Each poll reads the log past its last look and no further back, so its cost is
        what happened since (a range of the primary key), however long the history.

        Raises:
            StoreError: the store cannot be read (the next poll reads from the same place).
        """
        while True:
            upper = self.store.last_position()
            batch = self.store.read_all(self.after, BATCH, TYPES)
            settled = [event for event in batch if event.global_position <= upper]
            for event in settled:
                line = self._line(event)
                if line is not None:
                    self.report(line)
            if len(batch) < BATCH:
                self.after = max(self.after, upper)
                return
            self.after = settled[-1].global_position if settled else upper

    def _line(self, event: StoredEvent) -> str | None:
        if event.type not in TERMINAL_TYPES:
            return state_line(decode(event), self.levels())
        stream = tick_stream(event.data["tick_id"])
        if not self.workers:
            # Its first event says whether a person started it; a scheduled tick's line is
            # the executor's, and its whole stream is not read again for nothing.
            first = self.store.read_stream(stream, limit=1)
            if not (first and first[0].data.get("manual")):
                return None
        events = self.store.read_stream(stream)
        if events and (events[0].data.get("manual") or any(e.type == TAKEN for e in events)):
            return tick_line(events, self.prices)
        return None
