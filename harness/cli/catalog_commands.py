"""Commands for the routing catalog: check, route at an instant, show any stored revision."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.app import PLAIN_HELP, JsonOption, app, fail, out, print_json, settings, store_for

catalog_app = typer.Typer(
    help="The routing catalog: which model runs each tick.", rich_markup_mode=PLAIN_HELP
)
app.add_typer(catalog_app, name="catalog")


@catalog_app.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="A catalog, .toml or .json.")],
    as_json: JsonOption = False,
) -> None:
    """Validate a catalog: its revision, or every error with its path (exit 2)."""
    from harness.routing import CatalogError, load_catalog

    try:
        catalog = load_catalog(file)
    except CatalogError as exc:
        raise fail(str(exc), code=2) from exc
    if as_json:
        print_json(
            {
                "file": str(file),
                "valid": True,
                "revision": catalog.revision,
                "targets": list(catalog.targets),
                "lanes": list(catalog.lanes),
            }
        )
        return
    out.print(f"{file}: valid", highlight=False)
    out.print(f"revision  {catalog.revision}")
    out.print(f"targets   {', '.join(catalog.targets)}", highlight=False)
    out.print(f"lanes     {', '.join(catalog.lanes)}", highlight=False)


@catalog_app.command("route")
def route(
    level: Annotated[str, typer.Argument(help="The level whose lane decides.")],
    at: Annotated[str | None, typer.Option(help="ISO time with an offset (default: now).")] = None,
    catalog: Annotated[
        Path | None, typer.Option(help="Instead of the configured [routing] catalog.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Print the decision a tick of LEVEL would record at --at."""
    from harness.routing import CatalogError, NaiveTimeError, decide, load_catalog

    path = catalog or settings(needed=True).routing.catalog
    if path is None:
        raise fail("no catalog: set [routing] catalog in tickwork.toml or pass --catalog", 2)
    try:
        instant = datetime.fromisoformat(at) if at is not None else datetime.now(UTC)
        decision = decide(load_catalog(path), level, instant)
    except ValueError as exc:
        problem = exc if isinstance(exc, NaiveTimeError) else f"--at {at!r} is not an ISO time"
        raise fail(str(problem), code=2) from exc
    except CatalogError as exc:
        raise fail(str(exc), code=2) from exc
    if decision is None:
        raise fail(f"{path}: no lane for level {level!r}", code=2)
    if as_json:
        print_json(decision)
        return
    out.print(f"route       {decision.route_id}", highlight=False)
    out.print(f"rule        {decision.rule_id}", highlight=False)
    out.print(f"priority    {decision.policy_priority}", highlight=False)
    out.print(f"reasons     {', '.join(decision.reason_codes)}", highlight=False)
    out.print(f"window      {decision.window or '(none)'}", highlight=False)
    out.print(f"candidates  {' > '.join(decision.candidates)}", highlight=False)
    out.print(f"revision    {decision.revision}", highlight=False)
    out.print(f"at          {decision.at.isoformat()}", highlight=False)


@catalog_app.command("show")
def show(
    revision: Annotated[
        str | None,
        typer.Option(help="A stored revision (6+ hex digits of it), as decisions record it."),
    ] = None,
    catalog: Annotated[
        Path | None, typer.Option(help="Instead of the configured [routing] catalog.")
    ] = None,
) -> None:
    """Print `{revision, catalog}` as JSON: the catalog configured, or a stored --revision."""
    from harness.routing import CatalogError, RevisionError, load_catalog, recorded_catalog
    from harness.store import StoreError

    if revision is not None:
        if catalog is not None:
            raise fail("give --revision or --catalog, not both", 2)
        store = store_for(settings())
        try:
            recorded = recorded_catalog(store, revision)
        except RevisionError as exc:
            raise fail(str(exc), code=2) from exc
        except StoreError as exc:
            raise fail(str(exc)) from exc
        finally:
            store.close()
        found, document = recorded.revision, recorded.catalog
    else:
        path = catalog or settings().routing.catalog
        if path is None:
            raise fail("no catalog: set [routing] catalog in tickwork.toml or pass --catalog", 2)
        try:
            loaded = load_catalog(path)
        except CatalogError as exc:
            raise fail(str(exc), code=2) from exc
        found, document = loaded.revision, loaded.model_dump(mode="json")
    shown = {"revision": found, "catalog": document}
    out.print(json.dumps(shown, indent=2, sort_keys=True), highlight=False)
