"""The launcher a configuration asks for, and the one warm launcher a process shares.

`[runner] launcher` picks cold or warm; the warm one is told what the levels need
preloaded (`preloads_of`), so its fork server imports those protocols, agent CLIs and
tools and no others.
"""

from __future__ import annotations

import os
import threading
import typing
from collections.abc import Iterable

from harness.contracts import AGENT_CLIS, APIS, strands_tools
from harness.execution.launchers.base import Launcher
from harness.execution.launchers.cold import ColdLauncher
from harness.execution.launchers.warm import WarmLauncher
from harness.store import DRIVER_PRELOAD, is_postgresql

if typing.TYPE_CHECKING:
    from harness.config import Settings
    from harness.routing import Catalog


def launcher_for(settings: Settings, catalog: Catalog | None = None) -> Launcher:
    """The launcher `[runner] launcher` names; the warm one is shared by the process."""
    if settings.runner.launcher == "cold":
        return ColdLauncher()
    return shared_warm_launcher(preloads_of(settings, catalog))


def preloads_of(settings: Settings, catalog: Catalog | None = None) -> frozenset[str]:
    """What a fork server imports for these levels: their protocols, agent CLIs and tools.

    A routing catalog may send a tick to any of its targets, so their protocols and agent
    CLIs are preloaded too; `catalog` is the one in force, and without it (a process that
    has not read the configured one) every protocol and CLI is. A server preloading all
    warmed up in 2.8 s of CPU against 1.6 s for one protocol. Names are the protocols'
    (`harness.contracts.wire.APIS`), the agent kinds' and the Strands tools'
    (`harness.contracts.tiers.strands_tools`), and the store's driver when it is
    PostgreSQL (`DRIVER_PRELOAD`).
    """
    names: set[str] = {DRIVER_PRELOAD} if is_postgresql(settings.store.url) else set()
    if settings.routing.catalog is not None and catalog is None:
        names.update(APIS)
        names.update(AGENT_CLIS)
    for target in catalog.targets.values() if catalog is not None else ():
        names.add(target.api)
        if target.agent in AGENT_CLIS:
            names.add(target.agent)
    for level in settings.levels.values():
        names.add(level.api)
        if level.agent in AGENT_CLIS:
            names.add(level.agent)
        else:
            names.update(strands_tools(level.capabilities))
    return frozenset(names)


_shared: list[WarmLauncher] = []
_shared_lock = threading.Lock()


def shared_warm_launcher(preloads: Iterable[str] = ()) -> WarmLauncher:
    """One fork server per process, whatever number of runners it holds.

    It preloads what every runner asked for. A forked child starts without it: the
    launcher's threads and its server's sockets stay the parent's.
    """
    with _shared_lock:
        if not _shared:
            _shared.append(WarmLauncher(preloads=preloads))
            return _shared[0]
    _shared[0].preload(preloads)
    return _shared[0]


def _forget_in_child() -> None:
    global _shared_lock
    _shared.clear()
    _shared_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
