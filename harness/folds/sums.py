"""Folds whose result is integer sums per key: partial folds of disjoint ranges merge.

A kernel is a plain function of a batch (and of fixed arguments, such as the spend
model's prompt-size bounds) that returns the batch's sums per read-model key. Sums are
commutative, so folding a range in parts and adding the parts' sums equals folding it
whole, to the token; a kernel is picklable (a module-level function and plain values),
so a worker process can run it on its part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from harness.folds.ranges import Data

Sums = dict[tuple[Any, ...], list[int]]
"""Integer sums per read-model key; every list of one fold has the same length."""


@dataclass(frozen=True)
class Kernel:
    """A sum fold: `function(batch, *arguments)`; the function lives in a lean module."""

    function: Callable[..., Sums]
    arguments: tuple[Any, ...] = ()

    def __call__(self, batch: Iterable[Data]) -> Sums:
        """The sums per key of a batch of events' data."""
        return self.function(batch, *self.arguments)


@dataclass(frozen=True)
class Folded:
    """A range folded: its sums, the events of the kernel's kinds in them, all its events."""

    sums: Sums
    folded: int
    events: int


def merge(total: Sums, part: Iterable[tuple[tuple[Any, ...], list[int]]]) -> Sums:
    """Add the (key, sums) pairs of `part` into `total` (changed in place and returned).

    A key new to `total` takes the part's list itself: a part is not used after merging.
    """
    for key, values in part:
        row = total.get(key)
        if row is None:
            total[key] = values
        else:
            for index, value in enumerate(values):
                row[index] += value
    return total
