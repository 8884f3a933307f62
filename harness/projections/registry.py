"""The read models tickwork keeps, in one place, so every process folds the same set."""

from __future__ import annotations

from harness.prices import PriceBook
from harness.projections.calibration import CalibrationProjection
from harness.projections.digests import DigestsProjection
from harness.projections.levels import CancelScopesProjection
from harness.projections.projector import Projector
from harness.projections.spend import SpendProjection
from harness.projections.tick_spend import TickSpendProjection
from harness.projections.ticks import TicksProjection
from harness.store import EventStore


def projector_for(store: EventStore, prices: PriceBook, reprice: bool = False) -> Projector:
    """The projector with every read model tickwork keeps.

    `reprice`: its spend read model prices what it folds under `prices`, not as booked
    (`SpendProjection.reprice`), for a rebuild.
    """
    return Projector(
        store,
        [
            SpendProjection(prices, reprice),
            TicksProjection(),
            CalibrationProjection(),
            CancelScopesProjection(),
            DigestsProjection(),
            TickSpendProjection(prices),
        ],
    )
