"""Folds that a process of its own can run: a range of the log read on a bare driver.

A backlog of a million events is more than one core folds in two seconds, so a projection
whose fold is a sum folds it in parts, one per core, and merges the sums (the projector
decides, the store splits the range and runs the parts). A worker process starts by
module name (`python -m harness.folds.worker`) and imports only this package: the range
query the store wrote (`ranges`), the fold kernel (`sums`, and `spend` for the spend read
model) and the driver. Nothing here imports SQLAlchemy, pydantic or the price tables,
which would cost a worker half a second before its first row; nothing is re-exported,
so importing one module never pulls in another.
"""

__all__: list[str] = []
