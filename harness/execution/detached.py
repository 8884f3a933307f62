"""A manual tick whose owner outlives its caller: `tickwork tick --no-wait`.

The command ends at once, and the tick's owner (`ManualTick`) must see it to its end,
past the command and the terminal it ran in. The owner is the caller forked twice: the
middle process starts a session of its own (no terminal, so no hang-up or Ctrl-C of the
caller's reaches the tick) and ends at once, so the caller waits only for that, and the
owner, whose parent is gone, leaves no zombie behind. The owner imports nothing the
caller has not, takes the caller's configuration and router as they are, and opens a
store of its own: a database connection must not cross a fork.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

from harness.config import Settings
from harness.execution.manual import ManualTick
from harness.routing import Router
from harness.store import EventStore, configured_store

StoreUpstream = Callable[[EventStore], AbstractContextManager[Mapping[str, str]]]
"""Enters the environment a tick's process gets (its upstream), asking the owner's store."""

UNOWNED = "interrupted (the owner of tickwork tick --no-wait)"
"""Why a detached tick ends cancelled if its owner is interrupted (it has no Ctrl-C)."""


def start_detached(
    settings: Settings,
    level: str,
    *,
    tick_id: str,
    prompt: str | None,
    timeout: float | None,
    force: bool,
    router: Router | None,
    upstream: StoreUpstream,
) -> None:
    """Start the owner of one manual tick of `level`, in a session of its own; return at once.

    What went wrong in the owner (a level that cannot make a tick, an unreachable store)
    is its exit status alone: its standard streams lead nowhere, and nobody waits on it.
    """
    middle = os.fork()
    if middle:
        os.waitpid(middle, 0)
        return
    status = 1
    try:
        os.setsid()
        if os.fork():
            status = 0
        else:
            _streams_to_nowhere()
            store = configured_store(settings)
            try:
                with upstream(store) as env:
                    owner = ManualTick(settings, store, env=env, router=router, reason=UNOWNED)
                    owner.run(
                        owner.claim(
                            level, prompt=prompt, timeout=timeout, force=force, tick_id=tick_id
                        )
                    )
            finally:
                store.close()
            status = 0
    finally:
        os._exit(status)  # never back into the caller's stack, its atexit or its buffers


def _streams_to_nowhere() -> None:
    nowhere = os.open(os.devnull, os.O_RDWR)
    for stream in (0, 1, 2):
        os.dup2(nowhere, stream)
    os.close(nowhere)
