"""The calibration read model: each model's learned chars-per-token state.

Ticks are short-lived and the proxy restarts, so what they learn is recorded as
`CalibrationSampled` events and folded here with the same pure learner they use live
(`harness.contracts.calibration`); the proxy starts from these rows, and a tick from the
rows of its models that the runner puts in its payload. A model with no row starts from
the configured ratio.
"""

from __future__ import annotations

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


def _counts(state: Calibration) -> dict[str, int]:
    return {"samples": state.samples, "ignored": state.ignored}
