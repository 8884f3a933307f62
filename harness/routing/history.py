"""Every catalog that was ever in force, kept in the store under its revision.

A decision records only the revision, and the file it came from is edited in place, so
the catalog itself is stored the first time a decision names it: one `CatalogRecorded`
in the revision's own stream. Its event id is derived from the revision, so recording
it again (another tick, another replica, a spooled copy) is a no-op, not a second copy.
A stored catalog is shown as it was, never validated again: a rule added later must not
make an old decision unreadable.
"""

from __future__ import annotations

import re
from uuid import UUID, uuid5

from harness.contracts import CatalogRecorded, catalog_stream, decode
from harness.routing.catalog import Catalog
from harness.store import EventStore

REVISIONS = UUID("4f0c2d86-41b5-4c3e-9a53-6f1c1b8e2a17")
"""Namespace of the recorded catalogs' event ids."""
PREFIX = re.compile(r"^[0-9a-f]{6,64}$")
PAGE = 1000


class RevisionError(LookupError):
    """No stored catalog (or more than one) answers to the revision asked for."""


def catalog_record(catalog: Catalog) -> CatalogRecorded:
    """The event that stores `catalog`; the same event id for the same revision, always."""
    revision = catalog.revision
    return CatalogRecorded(
        event_id=uuid5(REVISIONS, revision),
        revision=revision,
        catalog=catalog.model_dump(mode="json"),
    )


def recorded_catalog(store: EventStore, revision: str) -> CatalogRecorded:
    """The stored catalog of a revision, given whole or by a prefix of 6 or more hex digits.

    Raises:
        RevisionError: the text is no revision, none is stored, or the prefix is ambiguous.
        StoreError: the store cannot be read.
    """
    wanted = revision.strip().lower()
    if not PREFIX.match(wanted):
        raise RevisionError(f"{revision!r} is not a revision: give 6 to 64 hex digits")
    if len(wanted) == 64:
        found = [decode(e) for e in store.read_stream(catalog_stream(wanted), limit=1)]
    else:
        found = [e for e in _all_recorded(store) if e.revision.startswith(wanted)]
    catalogs = {e.revision: e for e in found if isinstance(e, CatalogRecorded)}
    if not catalogs:
        raise RevisionError(f"no catalog with revision {wanted} is stored")
    if len(catalogs) > 1:
        listed = ", ".join(sorted(catalogs))
        raise RevisionError(f"revision {wanted} is ambiguous: it starts {listed}")
    return next(iter(catalogs.values()))


def _all_recorded(store: EventStore) -> list[CatalogRecorded]:
    recorded: list[CatalogRecorded] = []
    after = 0
    while batch := store.read_all(after, PAGE, [CatalogRecorded.type]):
        recorded.extend(e for e in map(decode, batch) if isinstance(e, CatalogRecorded))
        after = batch[-1].global_position
    return recorded
