"""The spend read model's fold kernel: calls and tokens per key of the spend read model.

It lives here rather than beside the read model (`harness.projections.spend`, which writes
the sums) so that a worker process folds spend without importing the projections, the
store or the price tables. A call's price tier depends on its prompt size and on the
model's thresholds that day, which only the price book knows; the kernel sums calls per
bucket between `bounds` (every threshold any model has) instead, and since a tier is the
same for every prompt size within a bucket, the writer maps buckets onto tiers exactly.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from operator import itemgetter

from harness.folds.ranges import Data
from harness.folds.sums import Sums

_FIELDS = itemgetter(
    "occurred_at",
    "model",
    "prompt_tokens",
    "level",
    "completion_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "estimated",
)
"""A BudgetSpent's fields the fold reads, taken from its dict in one C call per event."""


NANO = 1_000_000_000
"""Booked USD is summed in nano-dollars: integers, so partial folds add up exactly."""


def spend_sums(batch: Iterable[Data], bounds: tuple[int, ...]) -> Sums:
    """Sums per (level, model, UTC day, bucket, template, target, price source, billing).

    The nine sums are prompt, completion, cache read and cache write tokens, calls,
    estimated calls, cache written for an hour, web searches and the USD booked (in
    nano-dollars). A call's bucket is how many bounds lie below its prompt size
    (`bisect_left`, one C call), so calls in one bucket passed the same thresholds. Its
    template is its prompt template's hash, "" when it has none (spend recorded before
    tickwork kept it, or of no tick's prompt); its target the catalog target it was booked
    on, "" for none (no catalog, or a call the runner booked for a cut-off tick); its
    price source who priced it as it was booked, "" for spend booked without a price; its
    billing how it is paid for, `api` for spend booked before tickwork recorded it.
    """
    sums: Sums = {}
    for data in batch:
        at, model, prompt, level, completion, read, write, estimated = _FIELDS(data)
        template = data.get("template_hash") or ""
        target = data.get("target") or ""
        source = data.get("price_source") or ""
        billing = data.get("billing") or "api"
        bucket = bisect_left(bounds, prompt)
        key = (level, model, at[:10], bucket, template, target, source, billing)
        row = sums.get(key)
        if row is None:
            row = sums[key] = [0, 0, 0, 0, 0, 0, 0, 0, 0]
        add_call(row, prompt, completion, read, write, estimated)
        row[6] += data.get("cache_write_1h_tokens") or 0
        row[7] += data.get("web_search_requests") or 0
        row[8] += round((data.get("cost_usd") or 0.0) * NANO)
    return sums


def add_call(
    row: list[int],
    prompt: int,
    completion: int,
    read: int | None,
    write: int | None,
    estimated: int,
) -> None:
    """One call's tokens into the first six sums of a row of either spend read model.

    Prompt, completion, cache read and cache write tokens, calls, estimated calls.
    """
    row[0] += prompt
    row[1] += completion
    row[2] += read or 0
    row[3] += write or 0
    row[4] += 1
    row[5] += estimated
