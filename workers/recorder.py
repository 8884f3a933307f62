"""Records a tick's events the moment they happen; the spool takes them if the store cannot."""

from __future__ import annotations

import logging

from harness.contracts.events import GovernorEvent, TickEvent
from harness.contracts.payload import TickPayload
from harness.store import EventStore, StoreError, append_or_spool, open_store
from harness.store.spool import Spool

log = logging.getLogger(__name__)


class EventRecorder:
    """A tick never fails because the store is down: what cannot be appended is spooled."""

    def __init__(self, payload: TickPayload) -> None:
        self.spool = Spool(payload.spool_dir)
        self.store: EventStore | None
        try:
            self.store = open_store(
                payload.store_url, durability=payload.durability, spool=self.spool
            )
        except StoreError as exc:
            log.warning("store unavailable, spooling this tick's events: %s", exc)
            self.store = None

    def record(self, event: TickEvent | GovernorEvent) -> None:
        """Append the event now, or spool it when the store is out of reach."""
        append_or_spool(self.store, self.spool, event.stream_id, [event.to_record()])

    def record_all(self, events: list[TickEvent]) -> None:
        """Append events of one tick in one commit (all or none), or spool them."""
        if not events:
            return
        records = [event.to_record() for event in events]
        append_or_spool(self.store, self.spool, events[0].stream_id, records)

    def close(self) -> None:
        """Release the store's connections when the tick ends."""
        if self.store is not None:
            self.store.close()
