"""The dashboard's budgets panel: each budget's window as `tickwork budgets` shows it."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

from harness.api.html_parts import section, table
from harness.prices import format_usd
from harness.scheduling import BudgetStatus


def clock(value: datetime | None) -> str:
    """A UTC time to the minute ("" for none)."""
    return "" if value is None else f"{value.astimezone(UTC):%Y-%m-%d %H:%M}"


def budget_panel(budgets: list[BudgetStatus]) -> str:
    """Each budget's window: used, reserved, remaining, window end, burn, projection, run-out."""
    if not budgets:
        return section("Budgets", '<p class="empty">none configured</p>', "budgets")
    rows = []
    for budget in budgets:
        cells = (
            budget.name,
            f"{budget.scope} · {budget.window} · {budget.action}",
            budget.limit_text(),
            f"{budget.used_tokens:,} / {format_usd(budget.used_usd)}",
            f"{budget.reserved_tokens:,}",
            budget.remaining_text(),
            f"{budget.used_fraction:.0%}",
            clock(budget.window_end),
            f"{budget.burn_tokens_per_hour:,.0f} tok/h",
            f"{budget.projected_tokens:,} ({budget.projected_fraction:.0%})",
            clock(budget.runs_out_at) or "not this window",
        )
        mark = ""
        if budget.used_fraction >= 1:
            mark = ' class="over"'
        elif budget.runs_out_at is not None:
            mark = ' class="on-course"'
        rows.append(f"<tr{mark}>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    headers = (
        "budget",
        "scope · window · action",
        "limit",
        "used (tokens / USD)",
        "reserved",
        "remaining",
        "used",
        "window ends (UTC)",
        "burn",
        "at window end",
        "runs out (UTC)",
    )
    return section("Budgets", table(headers, rows), "budgets")
