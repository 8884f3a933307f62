"""Where each level's ticks send their model calls, as the dashboard's levels table says it.

The dashboard is served by another process than the scheduler, whose environment decides
where ticks go: the scheduler's heartbeat carries its banner's word for each wire protocol
(`Beat.wires`), and whether its ticks talk to tickwork's fake (`Beat.upstream`). A level
routed by the catalog goes to its lane's targets, named with their hosts.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from urllib.parse import urlsplit

from harness.config import Settings
from harness.store import Beat


def scheduler_of(live: Sequence[Beat]) -> Beat | None:
    """The live scheduler whose word the page gives (the newest beat, replicas alike)."""
    return next((beat for beat in live if beat.role == "scheduler"), None)


def level_upstreams(settings: Settings, scheduler: Beat | None) -> dict[str, str]:
    """Level -> where its ticks' calls go, in words."""
    lanes = _catalog_lanes(settings)
    found = {}
    for name, level in settings.levels.items():
        if name in lanes:
            found[name] = f"catalog: {lanes[name]}"
        elif scheduler is None:
            found[name] = f"{level.api}: as the scheduler's environment says (none runs)"
        else:
            found[name] = f"{level.api}: {scheduler.wires.get(level.api, 'not told')}"
    return found


def fake_notice(scheduler: Beat | None) -> str:
    """A line saying the ticks go to tickwork's fake, when they do ("" otherwise)."""
    if scheduler is None or scheduler.upstream is None:
        return ""
    script = f"{scheduler.upstream.removesuffix('/v1')}/_script"
    return (
        f'<p class="fake">Ticks go to tickwork\'s fake upstream at {escape(scheduler.upstream)}'
        " (the scheduler has no OPENAI_BASE_URL): its answers are canned, no provider is "
        f"called. Script them: POST {escape(script)}</p>"
    )


def _catalog_lanes(settings: Settings) -> dict[str, str]:
    """Level -> its lane's targets with their hosts (a catalog that cannot be read: none)."""
    if settings.routing.catalog is None:
        return {}
    from harness.routing import CatalogError, load_catalog

    try:
        catalog = load_catalog(settings.routing.catalog)
    except (CatalogError, OSError):
        return {}
    lanes = {}
    for level, lane in catalog.lanes.items():
        named = []
        for target_id in lane.targets():
            target = catalog.targets[target_id]
            host = urlsplit(target.base_url).hostname if target.base_url else None
            named.append(f"{target_id} ({host or f'${target.base_url_env}'})")
        lanes[level] = ", ".join(named)
    return lanes
