"""`tickwork levels [LEVEL]`: each level's schedule described (`harness.scheduling.describe`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.app import JsonOption, app, fail, out, print_json, settings, store_for

if TYPE_CHECKING:
    from harness.scheduling import LevelDescription, Transition

_TIME = "%Y-%m-%d %H:%M:%S"


@app.command()
def levels(
    level: Annotated[str | None, typer.Argument(help="Only this level.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Each level's schedule in words, its next 5 fire times, last runs and pause.

    Fire times include the level's jitter and are given in its zone and in UTC; the last
    runs and the pause (who, why, since when, the note of `tickwork pause --note`) come
    from the read models, a few rows per level.
    """
    from harness.contracts import utcnow
    from harness.prices import PriceBook
    from harness.projections import projector_for
    from harness.scheduling import describe_levels

    config = settings(needed=True)
    if level is not None and level not in config.levels:
        known = ", ".join(config.levels) or "none"
        raise fail(f"no level named {level!r} (known: {known})", code=2)
    store = store_for(config)
    try:
        projector_for(store, PriceBook(config.prices)).catch_up(["ticks"])
        names = [level] if level is not None else list(config.levels)
        described = describe_levels(config, store, names, utcnow())
    finally:
        store.close()
    if as_json:
        print_json([asdict(each) for each in described])
        return
    for each in described:
        out.print("\n".join(_lines(each)) + "\n", highlight=False)


def _lines(level: LevelDescription) -> list[str]:
    """One level's block of text."""
    lines = [f"{level.name}: {level.words}", f"  schedule: {level.schedule}"]
    if level.paused is not None:
        pause = level.paused
        lines.append(
            f"  paused since {pause.since:{_TIME}} UTC by {pause.by}: {pause.reason}"
            + (f" (note: {pause.note})" if pause.note else "")
        )
        if pause.resumes_at is not None:
            lines.append(
                f"  resumes by itself at {pause.resumes_at:{_TIME}} UTC, when its budget's "
                "window ends (sooner if a reload raises the limit)"
            )
    if level.max_runs is not None:
        lines.append(f"  runs: {level.runs} of at most {level.max_runs}")
    if level.refused is not None:
        lines.append(f"  refused, it does not run: {level.refused}")
    elif level.next:
        in_utc = level.timezone == "UTC"  # one column: the zone's time is the UTC one
        lines.append(f"  next fire times ({'UTC' if in_utc else level.timezone + ' / UTC'}):")
        lines += [
            ("    " if in_utc else f"    {fire.fires_at_local:{_TIME} %Z}  /  ")
            + f"{fire.fires_at:{_TIME}} UTC"
            + (f"  (slot {fire.slot:%H:%M:%S} UTC)" if fire.slot != fire.fires_at else "")
            for fire in level.next
        ]
    else:
        lines.append("  no further fire time: the schedule has ended")
    if level.dst is not None:
        lines += _dst_lines(level.dst, level.timezone)
    if level.recent:
        lines.append("  last runs:")
        lines += [
            f"    {run.at:{_TIME}} UTC  {run.tick_id}  {run.status}"
            + (f": {run.reason}" if run.reason else "")
            for run in level.recent
        ]
    else:
        lines.append("  no runs yet")
    return lines


_DST_SAYS = {
    "repeated": "the clocks go back: {span} happens twice (dst_repeated = {rule})",
    "skipped": "the clocks go forward: {span} does not happen (dst_skipped = {rule})",
}


def _dst_lines(dst: Transition, zone: str) -> list[str]:
    """The zone's next daylight-saving change and the slots the level fires around it."""
    from zoneinfo import ZoneInfo

    span = f"{dst.wall_from:%H:%M}-{dst.wall_to:%H:%M}"
    lines = [
        f"  next DST change: {dst.at:{_TIME}} UTC, "
        + _DST_SAYS[dst.kind].format(span=span, rule=dst.rule)
    ]
    if not dst.slots:
        lines.append("    no slot of the level fires around it")
    lines += [
        f"    slot {slot:{_TIME}} UTC  ({slot.astimezone(ZoneInfo(zone)):%H:%M %Z})"
        for slot in dst.slots
    ]
    if dst.more:
        lines.append(f"    … and {dst.more} more")
    return lines
