"""The ledger beside a provider's bill: tokens and USD per UTC day and model, and the drift.

The ledger's side is the spend read model's per-day sums over the bill's days alone
(`spend_report`, its day range closed): a reconciliation costs its window, not the
history. Only the model families the bill names are compared, since the ledger also
holds other providers' models (and local ones) that this bill cannot speak for; a
family the ledger booked on a day the bill has nothing for is compared with 0. Calls paid
for by a subscription (`billing = "subscription"`) are on no API bill: their tokens and
list value stay out, and the ledger's USD is what it billed.

The last reconciliation of each provider is a `ReconciliationChecked` in the provider's
stream, read back in one row for `/metrics`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from harness.contracts import (
    DriftRow,
    ReconciliationChecked,
    decode,
    reconciliation_stream,
    usd_sum,
)
from harness.prices import PriceBook
from harness.projections.bills import Bill, model_family
from harness.projections.spend import GroupBy, spend_report
from harness.store import EventStore


@dataclass(frozen=True)
class Reconciliation:
    """Every compared row, and the rows past the tolerance."""

    bill: Bill
    tolerance: float
    rows: list[DriftRow]

    @property
    def drifted(self) -> list[DriftRow]:
        """Rows whose drift is past the tolerance, in day and model order."""
        return [
            row for row in self.rows if row.drift is not None and abs(row.drift) > self.tolerance
        ]

    def event(self) -> ReconciliationChecked:
        """What the store keeps of it: the window, the largest drift and the drifted rows."""
        drifts = [abs(row.drift) for row in self.rows if row.drift is not None]
        return ReconciliationChecked(
            provider=self.bill.provider,
            first_day=self.bill.first_day,
            last_day=self.bill.last_day,
            tolerance=self.tolerance,
            rows=len(self.rows),
            max_drift=max(drifts, default=0.0),
            drifted=self.drifted,
        )


def relative_drift(provider: float, ledger: float) -> float:
    """The ledger's difference from the provider's figure, as a share of it (+: more).

    A figure the provider has as 0 and the ledger does not is a drift of 1 (100%). To nine
    decimals: two sums of the same USD in floats differ in their last bits.
    """
    if provider == 0:
        return 0.0 if ledger == 0 else 1.0
    return round((ledger - provider) / provider, 9) + 0.0


def reconcile(store: EventStore, prices: PriceBook, bill: Bill, tolerance: float) -> Reconciliation:
    """The bill's days and models beside the ledger's, priced by `prices`."""
    families = {family for _, family in bill.rows}
    with store.read_transaction() as conn:
        by: list[GroupBy] = ["day", "model", "billing"]
        spent = spend_report(conn, prices, by, bill.first_day, bill.last_day)
    ledger: dict[tuple[str, str], tuple[int, float | None]] = {}
    for row in spent:
        family = model_family(row.group["model"])
        if family not in families or row.group["billing"] == "subscription":
            continue
        key = (row.group["day"], family)
        tokens, usd = ledger.get(key, (0, 0.0))
        more = row.prompt_tokens + row.completion_tokens
        ledger[key] = (tokens + more, usd_sum(usd, row.billed_usd))
    keys = {(day.isoformat(), family) for day, family in bill.rows} | set(ledger)
    rows = [_row(bill, day, family, *ledger.get((day, family), (0, 0.0))) for day, family in keys]
    return Reconciliation(bill, tolerance, sorted(rows, key=lambda row: (row.day, row.model)))


def _row(bill: Bill, day: str, family: str, tokens: int, usd: float | None) -> DriftRow:
    billed = bill.rows.get((_date(day), family))
    provider_tokens = (billed.tokens if billed else None) or (0 if bill.has_tokens else None)
    provider_usd = _usd(billed.usd if billed else None, bill.has_usd)
    drifts = [
        relative_drift(float(theirs), float(ours))
        for theirs, ours in ((provider_tokens, tokens), (provider_usd, usd))
        if theirs is not None and ours is not None
    ]
    return DriftRow(
        day=_date(day),
        model=family,
        provider_tokens=provider_tokens,
        ledger_tokens=tokens,
        provider_usd=provider_usd,
        ledger_usd=usd,
        drift=max(drifts, key=abs, default=None),
    )


def _usd(billed: Decimal | None, has_usd: bool) -> float | None:
    if billed is not None:
        return float(billed)
    return 0.0 if has_usd else None


def _date(day: str) -> date:
    return date.fromisoformat(day)


def last_reconciliations(
    store: EventStore, providers: Iterable[str]
) -> list[ReconciliationChecked]:
    """Each provider's last reconciliation, if it has one: the last event of its stream."""
    found = []
    for provider in providers:
        stream = reconciliation_stream(provider)
        version = store.stream_version(stream)
        if not version:
            continue
        for stored in store.read_stream(stream, after=version - 1, limit=1):
            event = decode(stored)
            if isinstance(event, ReconciliationChecked):
                found.append(event)
    return found
