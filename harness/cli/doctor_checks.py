"""What `tickwork doctor` checks, each check a finding and, when it fails, what to do.

Every check only looks: the store is neither created nor migrated, no spool is ingested,
no event is appended, the serve port is bound for an instant at most, and a key is told
set or not, never shown. A check that cannot be made because an earlier one failed (no
heartbeat to read in a store out of reach) says so and fails with the same remedy.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from harness.config import Settings
from harness.contracts import (
    AGENT_CLIS,
    API_KEY_ENV_OF,
    BASE_URL_ENV,
    DEFAULT_BASE_URLS,
    Api,
)
from harness.store import SqlEventStore

CONNECT_SECONDS = 3.0
"""How long an upstream or the serve port gets to accept a connection."""


@dataclass(frozen=True)
class Check:
    """One thing checked: what was found, and what to do about it when it is wrong."""

    name: str
    found: str
    fix: str | None = None
    """None: the check passed."""

    @property
    def ok(self) -> bool:
        """Whether nothing needs doing."""
        return self.fix is None


def store_check(config: Settings) -> tuple[Check, SqlEventStore | None]:
    """The store reachable and at this tickwork's schema; the store to read if it is."""
    from harness.store import HEAD_REVISION, StoreError, open_store, safe_url, store_revision

    where = safe_url(config.store.url)
    try:
        revision = store_revision(config.store.url)
    except StoreError as exc:
        return Check("store", f"{where}: {exc}", "start the database or fix [store] url"), None
    if revision is None:
        found = f"{where}: no tickwork schema in it"
        return Check("store", found, "run `tickwork migrate` to create it"), None
    if revision != HEAD_REVISION:
        found = f"{where} at schema {revision}, this tickwork needs {HEAD_REVISION}"
        return Check("store", found, "run `tickwork migrate`"), None
    try:
        store = open_store(config.store.url)
    except StoreError as exc:
        return Check("store", f"{where}: {exc}", "start the database or fix [store] url"), None
    return Check("store", f"{where} at schema {revision} (current)"), store


def scheduler_check(store: SqlEventStore | None) -> Check:
    """A scheduler alive: one whose heartbeat is recent."""
    from harness.store import StoreError, beats

    start = "start one: `tickwork run` (ops/systemd/tickwork-run.service)"
    if store is None:
        return Check("scheduler", "cannot tell: the store cannot be read", start)
    try:
        found = [beat for beat in beats(store) if beat.role == "scheduler"]
    except StoreError as exc:
        return Check("scheduler", f"cannot tell: {exc}", start)
    now = datetime.now(UTC)
    alive = [beat for beat in found if beat.live(now)]
    if alive:
        beat = alive[0]
        ago = (now - beat.beat_at).total_seconds()
        return Check(
            "scheduler", f"alive: pid {beat.pid} on {beat.host}, last heartbeat {ago:.0f} s ago"
        )
    if found:
        last = found[0]
        seen = last.beat_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        return Check(
            "scheduler", f"none alive (last seen: pid {last.pid} on {last.host} {seen})", start
        )
    return Check("scheduler", "none has ever beaten in this store", start)


@dataclass(frozen=True)
class Upstream:
    """Where some levels' model calls go, and the key they send."""

    api: Api
    url: str | None
    """None: tickwork's fake (no OPENAI_BASE_URL set)."""
    key_env: str | None
    named_by: str
    """What names the endpoint, for the remedy: a variable, or the catalog's target."""
    missing: str | None = None
    """Why the endpoint is not known (a catalog's `base_url_env` unset)."""


def upstream_checks(
    config: Settings, store: SqlEventStore | None, env: Mapping[str, str] = os.environ
) -> list[Check]:
    """Each upstream the configured levels use: reachable, and its key set (never shown)."""
    users: dict[Upstream, list[str]] = {}
    for level, upstream in _level_upstreams(config, env):
        users.setdefault(upstream, []).append(level)
    return [_upstream_check(upstream, levels, store, env) for upstream, levels in users.items()]


def _level_upstreams(config: Settings, env: Mapping[str, str]) -> Iterator[tuple[str, Upstream]]:
    """Each level with each upstream it may call: its lane's targets, or its own `api`."""
    from harness.routing import load_catalog

    catalog = None if config.routing.catalog is None else load_catalog(config.routing.catalog)
    fake = not env.get("OPENAI_BASE_URL")
    for name, level in config.levels.items():
        lane = None if catalog is None else catalog.lanes.get(name)
        if lane is None or catalog is None:
            variable = BASE_URL_ENV[level.api]
            url = env.get(variable) or (None if fake else DEFAULT_BASE_URLS[level.api])
            key = None if url is None else API_KEY_ENV_OF[level.api]
            yield name, Upstream(level.api, url, key, variable)
            continue
        for target_id in lane.targets():
            target = catalog.targets[target_id]
            url = target.base_url or env.get(target.base_url_env or "")
            unset = None if url else f"its base_url_env {target.base_url_env} is not set"
            key = target.api_key_env or API_KEY_ENV_OF[target.api]
            named_by = target.base_url_env or f"the catalog's targets.{target_id}.base_url"
            yield f"{name} ({target_id})", Upstream(target.api, url, key, named_by, unset)


def _upstream_check(
    upstream: Upstream, levels: list[str], store: SqlEventStore | None, env: Mapping[str, str]
) -> Check:
    name = f"upstream {upstream.api} of {', '.join(levels)}"
    if upstream.missing is not None:
        return Check(name, upstream.missing, "set it in the service's environment")
    if upstream.url is None:
        return _fake_check(name, store)
    where = urlsplit(upstream.url)
    port = where.port or (443 if where.scheme == "https" else 80)
    endpoint = f"{where.hostname}:{port}"
    try:
        socket.create_connection((where.hostname, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        found = f"{endpoint} does not answer ({exc.strerror or exc})"
        return Check(name, found, f"start it, or point {upstream.named_by} elsewhere")
    if upstream.key_env is None:
        return Check(name, f"{endpoint} answers (it takes no key)")
    if not env.get(upstream.key_env):
        found = f"{endpoint} answers, {upstream.key_env} is not set"
        return Check(name, found, f"set {upstream.key_env} in the environment of the service")
    return Check(name, f"{endpoint} answers, {upstream.key_env} is set")


def _fake_check(name: str, store: SqlEventStore | None) -> Check:
    """No OPENAI_BASE_URL: ticks go to tickwork's fake, the running scheduler's if any."""
    from harness.devtools import service_fake

    shared = None if store is None else service_fake(store)
    if shared is not None:
        return Check(name, f"tickwork's fake at {shared} (the running scheduler's)")
    return Check(name, "tickwork's fake, served by the process that runs the ticks")


def port_check(config: Settings) -> Check:
    """The serve port free, or taken by a `tickwork serve` that answers as one."""
    host, port = config.api.host, config.api.port
    name = f"serve port {host}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as exc:
        return Check(name, f"cannot be resolved ({exc})", "fix [api] host")
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
            return Check(name, "free")
        except OSError as exc:
            taken = exc
    if _serves_tickwork(host, port, config):
        return Check(name, "taken by a `tickwork serve`, which answers")
    return Check(
        name,
        f"taken by another program ({taken.strerror or taken})",
        "stop it, or set another [api] port (or `tickwork serve --port`)",
    )


def _serves_tickwork(host: str, port: int, config: Settings) -> bool:
    request = urllib.request.Request(f"http://{host}:{port}/openapi.json")
    if config.api.token is not None:
        request.add_header("Authorization", f"Bearer {config.api.token.get_secret_value()}")
    try:
        with urllib.request.urlopen(request, timeout=CONNECT_SECONDS) as answer:
            return bool(json.load(answer).get("info", {}).get("title") == "tickwork")
    except (OSError, ValueError, AttributeError):
        return False


def agent_checks(config: Settings) -> list[Check]:
    """Each agent CLI at the version ops/agents pins; a missing one fails if a level needs it."""
    from harness.execution import agent_cli_states

    used = _agents_used(config)
    checks = []
    for state in agent_cli_states(config.agents.dir):
        name = f"agent {state.kind}"
        if state.ok:
            checks.append(Check(name, f"{state.package} {state.version} (pinned {state.pinned})"))
        elif state.kind in used:
            install = f"install the pinned CLIs: `npm ci --prefix {config.agents.dir}` (or `make`)"
            checks.append(Check(name, str(state.problem), install))
        else:
            checks.append(Check(name, f"{state.problem} (no level uses it)"))
    return checks


def _agents_used(config: Settings) -> set[str]:
    from harness.routing import load_catalog

    used: set[str] = {level.agent for level in config.levels.values()}
    if config.routing.catalog is not None:
        catalog = load_catalog(config.routing.catalog)
        lanes = catalog.lanes.values()
        used |= {catalog.targets[t].agent for lane in lanes for t in lane.targets()}
    return used & set(AGENT_CLIS)
