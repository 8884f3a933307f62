"""Folds that a process of its own can run: a range of the log read on a bare driver.

A backlog of a million events is more than one core folds in two seconds, so a projection
whose fold is a sum folds it in parts, one per core, and merges the sums (the projector
decides, the store splits the range and runs the parts). A worker process starts by
module name (`python -m harness.folds.worker`) and imports only this package: the range
query the store wrote (`ranges`), the fold kernel (`sums`, and `spend` for the spend read
model) and the driver. Nothing here imports SQLAlchemy, pydantic or the price tables,
which would cost a worker half a second before its first row. Every name is loaded on
first use (`harness.fronts`), so importing one never pulls in another module.
"""

import typing

from harness import fronts

if typing.TYPE_CHECKING:
    from harness.folds.packed import (
        EPOCH,
        TICK_PREFIX,
        pack,
        positions,
        records_of,
        restore,
        unpack_data,
    )
    from harness.folds.parallel import Workers
    from harness.folds.ranges import (
        Database,
        EventData,
        PackedQuery,
        RangeQuery,
        counted,
        event_slices,
        fetched,
        open_cursor,
    )
    from harness.folds.spend import NANO, spend_sums
    from harness.folds.sums import Folded, Kernel, Sums, merge
    from harness.folds.tick_spend import COUNTERS, tick_spend_sums

__getattr__, __all__ = fronts.declared(__name__)
