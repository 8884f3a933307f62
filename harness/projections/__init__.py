"""Read models folded from the event log: spend, ticks and calibration, rebuilt from zero."""

from __future__ import annotations

from harness.prices import PriceBook
from harness.projections.base import EventData, Projection
from harness.projections.calibration import CalibrationProjection, load_calibrations
from harness.projections.projector import Projector
from harness.projections.spend import SpendProjection, SpendRow, spend_report
from harness.projections.ticks import TicksProjection
from harness.store.sql import SqlEventStore

__all__ = [
    "CalibrationProjection",
    "EventData",
    "Projection",
    "Projector",
    "SpendProjection",
    "SpendRow",
    "TicksProjection",
    "load_calibrations",
    "projector_for",
    "spend_report",
]


def projector_for(store: SqlEventStore, prices: PriceBook) -> Projector:
    """The projector with every read model tickwork keeps."""
    return Projector(store, [SpendProjection(prices), TicksProjection(), CalibrationProjection()])
