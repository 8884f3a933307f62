"""`tickwork digest`: what happened in a period, printed, written or published."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.app import app, fail, out, parse_since, settings, store_for
from harness.digests import DigestFormat


@app.command()
def digest(
    since: Annotated[
        str | None, typer.Option(help="Period start: `1h`, `1d` ago or an ISO time.")
    ] = None,
    start: Annotated[
        str | None, typer.Option("--from", help="Period start (ISO time; naive is UTC).")
    ] = None,
    end: Annotated[str | None, typer.Option("--to", help="Period end (default: now).")] = None,
    level: Annotated[
        list[str] | None, typer.Option(help="Only these levels (repeatable; default all).")
    ] = None,
    fmt: Annotated[DigestFormat | None, typer.Option("--format", help="md, html or json.")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write here, not stdout.")] = None,
    name: Annotated[
        str | None, typer.Option(help="A configured [digests.<name>]: its levels, format, targets.")
    ] = None,
    send: Annotated[
        bool, typer.Option(help="Publish to the named digest's targets and record it.")
    ] = False,
    schema: Annotated[
        bool, typer.Option(help="Print the JSON Schema of --format json, and nothing else.")
    ] = False,
) -> None:
    """Build a digest of a period: per level ticks, spend, failures, skips, excerpts."""
    from harness.config import DigestConfig
    from harness.digests import Digest, build_digest, render
    from harness.projections import projector_for
    from harness.scheduling import refresh

    if schema:
        import orjson

        sys.stdout.write(
            orjson.dumps(Digest.model_json_schema(), option=orjson.OPT_INDENT_2).decode()
        )
        sys.stdout.write("\n")
        return
    config = settings(needed=True)
    if since is not None and start is not None:
        raise fail("give --since or --from, not both", code=2)
    named = config.digests.get(name) if name else None
    if name and named is None:
        known = ", ".join(config.digests) or "none configured"
        raise fail(f"no digest named {name!r} (known: {known})", code=2)
    if send and named is None:
        raise fail("--send needs --name of a configured digest: its targets", code=2)
    period_end = parse_since(end) if end else datetime.now(UTC)
    period_start = parse_since(since or start or "1d")
    if period_start >= period_end:
        raise fail(
            f"the period is empty: {period_start:%Y-%m-%d %H:%M} is not before the end", code=2
        )
    unknown = sorted(set(level or []) - set(config.levels))
    if unknown:
        raise fail(f"unknown level(s) {unknown} (known: {', '.join(config.levels)})", code=2)
    base = named or DigestConfig(every="1d")
    chosen = base.model_copy(update={"levels": level or base.levels, "format": fmt or base.format})
    store = store_for(config)
    try:
        prices = refresh(config, store)
        projector = projector_for(store, prices)
        if send:
            # Only here: it brings apprise, psutil and tenacity, ~75 ms of a plain digest.
            from harness.digests import Period, Publisher

            assert name is not None
            publisher = Publisher(config, store, projector, prices, _report)
            published = publisher.publish(name, chosen, Period(period_start, period_end))
            if published is None:
                raise fail(f"digest {name} for this period was published already")
            for target, result in published.delivery.items():
                out.print(f"{target}: {result}", highlight=False)
            out.print(f"kept at {published.path}", highlight=False)
            if any(result != "ok" for result in published.delivery.values()):
                raise typer.Exit(1)
            return
        built = build_digest(
            store,
            projector,
            prices,
            name or "adhoc",
            period_start,
            period_end,
            chosen.levels or list(config.levels),
            chosen.excerpt_chars,
        )
    finally:
        store.close()
    text = render(built, chosen.format, config.api.public_url)
    if out_file is None:
        sys.stdout.write(text)
    else:
        out_file.write_text(text, encoding="utf-8")
        out.print(f"written to {out_file}", highlight=False)


def _report(line: str) -> None:
    out.print(line, highlight=False)
