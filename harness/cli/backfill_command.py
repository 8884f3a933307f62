"""`tickwork backfill`: ask the running services to run a past range's unclaimed slots."""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from harness.cli.app import JsonOption, app, fail, out, print_json, settings, store_for

if TYPE_CHECKING:
    from harness.scheduling import Progress, RunForecast

REFUSED = 3
"""Exit code of a backfill its forecast says a budget would stop (2 is bad input)."""
SHOWN_SLOTS = 20
"""Slots listed one a line without --json (the JSON lists them all)."""

Overlap = Literal["buffer_all", "allow", "skip"]


def _time(option: str, text: str) -> datetime:
    from harness.timespec import parse_since

    try:
        return parse_since(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


@app.command()
def backfill(
    level: Annotated[str, typer.Argument(help="The level whose past slots to run.")],
    start: Annotated[
        str, typer.Option("--from", help="First instant of the range (ISO, naive is UTC; or 12h).")
    ],
    end: Annotated[str, typer.Option("--to", help="End of the range, itself excluded.")],
    overlap: Annotated[
        Overlap,
        typer.Option(help="buffer_all: one after another; allow: side by side; skip: busy skips."),
    ] = "buffer_all",
    max_at_once: Annotated[
        int, typer.Option("--max", min=1, help="Ticks of the backfill in flight at once at most.")
    ] = 1,
    wait: Annotated[
        bool, typer.Option("--wait", help="Follow its progress until it finishes.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the slots, their forecast cost and the budgets crossed."
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Run even if the forecast crosses a stop budget.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Run the level's slots in [--from, --to) that have no tick yet, as ordinary ticks.

    The request is recorded for the running services (`tickwork run`), which claim each
    slot once across replicas and reruns, under the level's pause, budget and caps, and
    tag its ticks with the backfill's id. `tickwork status` shows its progress;
    `tickwork cancel --backfill ID` stops it.

    Its forecast (`--dry-run`): each tick at the level's median of the last 7 days (its
    reservation without history), and the budgets the run would cross, at which slot. A
    run that would cross a `stop` or `pause` budget is refused (exit 3) unless `--force`.
    """
    from harness.prices import PriceBook
    from harness.projections import projector_for
    from harness.scheduling import (
        BackfillError,
        BackfillRefused,
        Budgets,
        backfill_progress,
        backfills,
        forecast_backfill,
        operator,
        request_backfill,
    )

    config = settings(needed=True)
    begins, ends = _time("--from", start), _time("--to", end)
    store = store_for(config)
    prices = PriceBook(config.prices)
    projector = projector_for(store, prices)
    try:
        projector.catch_up(["ticks", "tick_spend"])
        budgets = Budgets(store, projector, prices, config)
        if dry_run:
            try:
                forecast = forecast_backfill(budgets, level, begins, ends, max_at_once)
            except BackfillError as exc:
                raise fail(str(exc), code=2) from exc
            if as_json:
                from harness.api import BackfillForecast

                print_json(BackfillForecast.of(forecast).model_dump(mode="json"))
            else:
                show_forecast(forecast)
            return
        try:
            request = request_backfill(
                config,
                store,
                level,
                begins,
                ends,
                overlap=overlap,
                max_at_once=max_at_once,
                by=operator(),
                budgets=budgets,
                force=force,
            )
        except BackfillRefused as exc:
            raise fail(str(exc), code=REFUSED) from exc
        except BackfillError as exc:
            raise fail(str(exc), code=2) from exc
        if as_json and not wait:
            print_json(request.model_dump(mode="json", exclude={"event_id"}))
            return
        out.print(
            f"backfill {request.backfill_id}: {request.slots} slot(s) of {level} from "
            f"{request.start:%Y-%m-%d %H:%M:%S} to {request.end:%Y-%m-%d %H:%M:%S} UTC, "
            f"{overlap}, at most {max_at_once} at once (the running services claim them)"
        )
        if not wait:
            return
        shown = ""
        while True:
            projector.catch_up(["ticks"])
            now = backfill_progress(config, store, request)
            line = describe(now)
            if line != shown:
                out.print(line)
                shown = line
            state = next(b.state for b in backfills(store) if b.backfill_id == request.backfill_id)
            if state != "open":
                out.print(f"backfill {request.backfill_id} {state}")
                if as_json:
                    print_json({"backfill_id": request.backfill_id, "state": state, **vars(now)})
                return
            time.sleep(1)
    finally:
        store.close()


def describe(progress: Progress) -> str:
    """A backfill's progress in one line, for people."""
    ended = ", ".join(f"{count} {status}" for status, count in sorted(progress.statuses.items()))
    return (
        f"{progress.claimed}/{progress.slots} claimed, {progress.in_flight} in flight, "
        f"{progress.ended} ended" + (f" ({ended})" if ended else "")
    )


def show_forecast(forecast: RunForecast) -> None:
    """The forecast for people: slots, cost, crossings, and whether it would be refused."""
    from harness.prices import format_usd

    slots, tick = forecast.slots, forecast.tick
    out.print(
        f"{len(slots)} slot(s) of {forecast.level} to run"
        + (
            f" ({forecast.left_alone} with a tick already left alone)"
            if forecast.left_alone
            else ""
        )
    )
    for slot in slots[:SHOWN_SLOTS]:
        out.print(f"  {slot:%Y-%m-%d %H:%M:%S} UTC")
    if len(slots) > SHOWN_SLOTS:
        out.print(f"  … {len(slots) - SHOWN_SLOTS} more (--json lists them all)")
    usd = "USD unpriced" if tick.usd is None else f"USD {format_usd(tick.usd)}"
    total = "USD unpriced" if forecast.usd is None else f"USD {format_usd(forecast.usd)}"
    out.print(f"forecast: {tick.tokens:,} tokens, {usd} a tick ({tick.source})")
    out.print(f"          {forecast.tokens:,} tokens, {total} in all")
    for crossing in forecast.crossings:
        out.print(f"crosses {crossing.words()}")
    refusing = forecast.refusing
    if refusing is not None:
        out.print(f"would be refused without --force: budget {refusing.budget} stops its slots")
    elif not forecast.crossings:
        out.print("crosses no budget")
