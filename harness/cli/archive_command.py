"""`tickwork archive`: closed ticks older than `[retention] hot_days` leave for day archives."""

from __future__ import annotations

from datetime import date
from typing import TYPE_CHECKING, Annotated

import typer

from harness.cli.app import app, fail, out, settings, store_for

if TYPE_CHECKING:
    from harness.scheduling import TranscriptsArchived


@app.command("archive")
def archive(
    before: Annotated[
        str | None,
        typer.Option(help="Archive the UTC days before this date (default: hot_days ago)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would leave; change nothing.")
    ] = False,
) -> None:
    """Move closed ticks of past UTC days into one archive per day (`tickwork run` does it daily).

    Each day's events, result and log files go to `<archive>/<YYYY-MM-DD>/`, verified,
    before they leave the store; a run cut short is finished by the next one. Transcripts
    older than `[retention] transcript_days` leave first, for the same folder.
    """
    from harness.scheduling import Archiver
    from harness.store import ArchiveError, StoreError, convert_to_incremental_vacuum

    cutoff = None
    if before is not None:
        try:
            cutoff = date.fromisoformat(before)
        except ValueError:
            raise typer.BadParameter(f"{before!r} is not an ISO date like 2026-11-01") from None
    config = settings()
    store = store_for(config)
    try:
        archiver = Archiver(config, store, lambda line: out.print(line))
        days = archiver.archive(cutoff, dry_run)
    except (ValueError, ArchiveError) as exc:
        raise fail(str(exc), code=2) from exc
    except StoreError as exc:
        raise fail(str(exc)) from exc
    finally:
        store.close()
    if not dry_run:
        try:
            said = convert_to_incremental_vacuum(config.store.url)
        except StoreError as exc:
            raise fail(f"archived, but not converted to incremental vacuum: {exc}") from exc
        if said:
            out.print(said)
    if archiver.transcripts:
        _print_transcripts(archiver.transcripts, dry_run)
    if not days:
        out.print(f"nothing to archive before {cutoff or archiver.cutoff()}")
        return
    from rich.table import Table

    table = Table("day", "ticks", "events", "files", "deleted", "archive", box=None)
    for day in days:
        table.add_row(
            day.day.isoformat(),
            f"{day.ticks:,}",
            f"{day.events:,}" if day.events else "",
            f"{day.files:,}",
            f"{day.deleted:,}",
            str(day.folder),
        )
    if dry_run:
        out.print("dry run: nothing changed; these days would be archived")
    out.print(table)


def _print_transcripts(days: list[TranscriptsArchived], dry_run: bool) -> None:
    """The days whose transcripts left (or, dry, would leave) before their ticks."""
    from harness.store import TRANSCRIPTS_FILE

    if dry_run:
        out.print("dry run: these days' transcripts would be archived")
    from rich.table import Table

    table = Table("day", "transcripts", "entries", "left the store", "archive", box=None)
    for day in days:
        table.add_row(
            day.day.isoformat(),
            f"{day.ticks:,}",
            f"{day.entries:,}",
            f"{day.dropped:,}",
            str(day.folder / TRANSCRIPTS_FILE),
        )
    out.print(table)
