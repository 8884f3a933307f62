"""The calibration read model: each model's learned chars-per-token state.

Ticks are short-lived and the proxy restarts, so what they learn is recorded as
`CalibrationSampled` events and folded here with the same pure learner they use live
(`harness.contracts.calibration`); the proxy starts from these rows, and a tick from the
rows of its models that the runner puts in its payload. A model with no row starts from
the configured ratio.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import sqlalchemy as sa

from harness.contracts import Calibration, CalibrationSampled, Sample
from harness.projections.base import EventData, Projection, upsert
from harness.projections.projector import Projector
from harness.store import EventStore, Json, metadata

governor_calibration = sa.Table(
    "governor_calibration",
    metadata,
    sa.Column("model", sa.String(200), primary_key=True),
    sa.Column("window", Json, nullable=False),
    sa.Column("samples", sa.BigInteger(), nullable=False),
    sa.Column("ignored", sa.BigInteger(), nullable=False),
)


def load_calibrations(
    conn: sa.Connection, models: Iterable[str] | None = None
) -> dict[str, Calibration]:
    """The stored state of `models` (of every model by default), as folded so far."""
    query = sa.select(governor_calibration)
    if models is not None:
        query = query.where(governor_calibration.c.model.in_(list(models)))
    return {
        row.model: Calibration(tuple(row.window), int(row.samples), int(row.ignored))
        for row in conn.execute(query)
    }


class CalibrationProjection(Projection):
    """Each model's learned chars-per-token, so a tick and the proxy start from what was learned."""

    name = "calibration"
    types = frozenset({CalibrationSampled.type})
    tables = (governor_calibration,)

    def apply(self, conn: sa.Connection, batch: Iterable[EventData]) -> None:
        """Replay the batch's samples through the same learner the governor runs live."""
        known: dict[str, Calibration] | None = None
        changed: dict[str, Calibration] = {}
        for _, _, data in batch:
            if known is None:
                known = load_calibrations(conn)
            model = data["model"]
            sample = Sample(
                data["chars"], data["prompt_tokens"], data.get("cached_tokens"), data["cached"]
            )
            changed[model], _ = changed.get(model, known.get(model, Calibration())).observe(sample)
        if not changed:
            return
        insert = upsert(conn, governor_calibration)
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=["model"],
                set_={name: insert.excluded[name] for name in ("window", "samples", "ignored")},
            ),
            [
                {"model": model, "window": list(state.window), **_counts(state)}
                for model, state in changed.items()
            ],
        )


def current_calibrations(
    store: EventStore, models: Iterable[str] | None = None
) -> dict[str, Calibration]:
    """Fold the samples recorded since the last catch-up, then read the state of `models`."""
    Projector(store, [CalibrationProjection()]).catch_up()
    with store.read_transaction() as conn:
        return load_calibrations(conn, models)


class SharedCalibrations:
    """`current_calibrations` for the threads of one process, one catch-up serving many.

    Each tick being prepared folded the samples since the last catch-up: a transaction
    on the calibration checkpoint's lock (eight statements on PostgreSQL), so the ticks
    of a wave, prepared at once, folded one after another, most finding nothing new. A
    caller is served by a catch-up begun after it asked, so it sees every sample recorded
    before it asked, as a catch-up of its own would have shown it.
    """

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._folding = threading.Lock()
        self._counting = threading.Lock()
        self._begun = 0
        """Catch-ups begun so far; the one numbered `_begun + 1` begins after a caller asks."""
        self._served: tuple[int, dict[str, Calibration]] = (0, {})
        """The number of the last catch-up that ended, and every model's state it read."""

    def current(self, models: Iterable[str]) -> dict[str, Calibration]:
        """The state of `models`, folded by this caller or by one that began after it asked."""
        with self._counting:
            wanted = self._begun + 1
        with self._folding:
            served, states = self._served
            if served < wanted:
                with self._counting:
                    self._begun += 1
                    begun = self._begun
                states = current_calibrations(self.store)
                self._served = (begun, states)
        return {model: states[model] for model in models if model in states}


def _counts(state: Calibration) -> dict[str, int]:
    return {"samples": state.samples, "ignored": state.ignored}
