"""Event ids: time-ordered UUIDs (version 7, RFC 9562), minted without a system call.

Every event tickwork appends carries a fresh id, and the store keeps a unique index on
it. Random (version 4) ids land anywhere in that index: a batch of 100 dirtied about 100
of its leaf pages, all written to the WAL at commit, and SQLite batch appends ran at half
the speed of the same table without the index. A version 7 id starts with the
millisecond it was minted, so new ids go to the index's right edge, a page or two per
batch, as the global position's own index does.

`uuid_utils` (the Rust `uuid` crate) mints them: 2 µs against `uuid4`'s 3.6 µs (and 75 µs
on a VM whose kernel random source was slow, since `uuid4` asks the kernel every time),
monotonic within a process (a counter breaks ties inside a millisecond), and fork-safe:
it reseeds its generator in every forked child (`os.register_at_fork`), which matters
because warm ticks are forked from one fork server and must not mint their parent's ids.

Ids that are derived on purpose (uuid5 of a tick and a slot) are not minted here.
"""

from __future__ import annotations

from uuid import UUID

from uuid_utils.compat import uuid7


def new_event_id() -> UUID:
    """A fresh event id: the current millisecond, then random bits (a standard `uuid.UUID`)."""
    return uuid7()
