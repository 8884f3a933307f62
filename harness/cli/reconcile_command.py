"""`tickwork reconcile`: the ledger beside a provider's usage and cost exports, day by day."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.app import JsonOption, app, fail, out, print_json, print_rows, settings, store_for

if TYPE_CHECKING:
    from harness.contracts import DriftRow, Provider

_TOLERANCE = re.compile(r"^(\d+(?:\.\d+)?)(%?)$")


def parse_tolerance(text: str) -> float:
    """`0.5%` or `0.005`: the share a row may drift before it counts as drifted."""
    match = _TOLERANCE.match(text.strip())
    if match is None:
        raise typer.BadParameter(f"{text!r} is not a tolerance like '0.5%' or '0.005'")
    share = float(match.group(1)) / (100 if match.group(2) else 1)
    if share >= 1:
        raise typer.BadParameter(f"{text!r}: a tolerance is below 100%")
    return share


@app.command("reconcile")
def reconcile_command(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="The provider's exports, as its admin API answered them (usage and/or "
            "costs, JSON; see README 'Reconciling with the provider's bill')."
        ),
    ],
    provider: Annotated[
        str | None,
        typer.Option(help="openai or anthropic; told by the files' shape when not given."),
    ] = None,
    tolerance: Annotated[
        str, typer.Option(help="How far a row may drift, e.g. 0.5% or 0.005.")
    ] = "0.5%",
    as_json: JsonOption = False,
) -> None:
    """Per UTC day and model, the provider's tokens and USD beside the ledger's, and the drift.

    Exit 1 when a row drifts past the tolerance (each one named), 2 on an export tickwork
    cannot read (nothing is stored then). The check is stored as `ReconciliationChecked`,
    which `/metrics` shows.
    """
    from harness.projections import BillError, projector_for, read_bill, reconcile
    from harness.routing import price_book
    from harness.store import StoreError

    share = parse_tolerance(tolerance)
    if provider not in (None, "openai", "anthropic"):
        raise typer.BadParameter(f"--provider {provider!r}: choose openai or anthropic")
    chosen: Provider | None = provider  # type: ignore[assignment]
    try:
        bill = read_bill(files, chosen)
    except BillError as exc:
        raise fail(str(exc), 2) from exc
    config = settings()
    prices = price_book(config)
    store = store_for(config)
    try:
        projector_for(store, prices).catch_up(["spend"])
        checked = reconcile(store, prices, bill, share)
        event = checked.event()
        store.append(event.stream_id, [event.to_record()])
    except StoreError as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()
    drifted = checked.drifted
    if as_json:
        print_json(
            {
                "provider": bill.provider,
                "first_day": bill.first_day,
                "last_day": bill.last_day,
                "tolerance": share,
                "rows": [row.model_dump(mode="json") for row in checked.rows],
                "drifted": [row.model_dump(mode="json") for row in drifted],
            }
        )
    else:
        _print_table(checked.rows)
    if drifted:
        listed = "; ".join(f"{row.day} {row.model} ({_percent(row.drift)})" for row in drifted)
        raise fail(f"{len(drifted)} row(s) drift past {tolerance}: {listed}")
    if not as_json:
        out.print(f"{bill.provider}: every row within {tolerance} of the ledger")


def _print_table(rows: list[DriftRow]) -> None:
    from harness.prices import format_usd

    def tokens(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    def usd(value: float | None) -> str:
        return "-" if value is None else format_usd(value)

    print_rows(
        ["day", "model", "provider tokens", "ledger tokens", "provider USD", "ledger USD", "drift"],
        [
            [
                row.day.isoformat(),
                row.model,
                tokens(row.provider_tokens),
                tokens(row.ledger_tokens),
                usd(row.provider_usd),
                format_usd(row.ledger_usd),
                _percent(row.drift),
            ]
            for row in rows
        ],
    )


def _percent(drift: float | None) -> str:
    return "-" if drift is None else f"{drift:+.2%}"
