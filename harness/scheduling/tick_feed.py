"""The ticks other processes ran on this store, told in the service's log as they end.

A tick started by hand (`tickwork tick`, the dashboard's buttons) runs in a process of
its own, so the service that an operator watches never saw it: this follows the log's
terminal events and prints the line of each manual tick that ended, as the executor
prints the service's own.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.contracts import TERMINAL_TYPES, tick_stream
from harness.prices import PriceBook
from harness.projections import tick_line
from harness.store import EventStore

BATCH = 1000


class TickFeed:
    """Reads the terminal events appended since it last looked; reports the manual ticks'."""

    def __init__(self, store: EventStore, prices: PriceBook, report: Callable[[str], None]) -> None:
        self.store = store
        self.prices = prices
        self.report = report
        self.after = store.last_position()

    def poll(self) -> None:
        """Report the manual ticks that ended since the last poll.

        Each poll reads the log past its last look and no further back, so its cost is
        what happened since (a range of the primary key), however long the history.

        Raises:
            StoreError: the store cannot be read (the next poll reads from the same place).
        """
        while True:
            upper = self.store.last_position()
            batch = self.store.read_all(self.after, BATCH, TERMINAL_TYPES)
            settled = [event for event in batch if event.global_position <= upper]
            for event in settled:
                events = self.store.read_stream(tick_stream(event.data["tick_id"]))
                if events and events[0].data.get("manual"):
                    self.report(tick_line(events, self.prices))
            if len(batch) < BATCH:
                self.after = max(self.after, upper)
                return
            self.after = settled[-1].global_position if settled else upper
