"""`tickwork budgets`: each budget's window as it stands, from the budgets read model."""

from __future__ import annotations

from datetime import datetime

from harness.cli.app import JsonOption, app, fail, out, print_json, print_rows, settings, store_for


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at else "-"


@app.command()
def budgets(as_json: JsonOption = False) -> None:
    """Used, reserved, remaining, window end, burn rate, projection and run-out of every budget."""
    from harness.prices import PriceBook, format_usd
    from harness.projections import projector_for
    from harness.scheduling import Budgets, budget_statuses
    from harness.store import StoreError

    config = settings()
    store = store_for(config)
    prices = PriceBook(config.prices)
    try:
        statuses = budget_statuses(Budgets(store, projector_for(store, prices), prices, config))
    except StoreError as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()
    if as_json:
        print_json([status.model_dump(mode="json") for status in statuses])
        return
    if not statuses:
        out.print("no budgets configured ([[budgets]], or a level's daily_*_budget)")
        return
    rows = []
    for s in statuses:
        rows.append(
            [
                s.name,
                s.scope,
                s.window,
                s.action,
                s.limit_text(),
                f"{s.used_tokens:,} / {format_usd(s.used_usd)} / {format_usd(s.used_list_usd)}",
                f"{s.reserved_tokens:,}",
                s.remaining_text(),
                f"{s.used_fraction:.0%}",
                _when(s.window_end),
                f"{s.burn_tokens_per_hour:,.0f} tok/h",
                f"{s.projected_tokens:,} ({s.projected_fraction:.0%})",
                _when(s.runs_out_at),
            ]
        )
    print_rows(
        [
            "budget",
            "scope",
            "window",
            "action",
            "limit",
            "used (tokens / USD billed / USD list)",
            "reserved",
            "remaining",
            "used %",
            "window ends (UTC)",
            "burn",
            "at window end",
            "runs out (UTC)",
        ],
        rows,
    )
    for s in statuses:
        if s.resumes_at is not None:
            out.print(
                f"{s.name} holds {', '.join(s.paused_levels)} paused until "
                f"{_when(s.resumes_at)} UTC, when its window ends (sooner if a reload "
                "raises the limit)",
                highlight=False,
            )
