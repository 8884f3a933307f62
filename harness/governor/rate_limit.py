"""A model call's turn under shared rate limits: the one check a tick and the proxy both make.

Before a call is sent, its caller asks the store's buckets in scope for its turn
(`harness.store.rate_buckets.take`); when a bucket is full the answer says how long until
it will not be, and the caller sleeps that long and asks again, until it is taken or its
deadline is nearer than its turn (then it gives up, and does not call). A provider's 429
with `retry-after` blocks the buckets it was sent under for that long, so every caller of
them waits instead of being refused too. The tick's hook (`workers.rate_limit`) drives it
with blocking sleeps; the proxy, on its event loop, with `asyncio` ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass

from harness.contracts import Scope
from harness.routing import answer_quota
from harness.store import Call, EventStore, Turn, block, take

Clock = Callable[[], float]

TOO_MANY_REQUESTS = 429


@dataclass(frozen=True)
class Outcome:
    """How a call's asking for its turn ended."""

    taken: bool
    waited: float
    """Seconds slept for the turn (0: the buckets had room at once)."""
    bucket: str | None = None
    """The bucket that held the call back last (None: none did)."""
    reason: str | None = None
    turn: float = 0.0
    """When not taken: how far off the turn was when the deadline stopped the wait."""


def _asking(
    store: EventStore, scopes: Sequence[Scope], call: Call, deadline: float, clock: Clock
) -> Generator[float, None, Outcome]:
    """Ask until taken or out of time; yields each wait for the driver to sleep through."""
    began = clock()
    held: Turn | None = None
    while True:
        turn = take(store, scopes, call)
        now = clock()
        if turn.wait <= 0:
            return _outcome(True, now - began, held)
        held = turn
        if now + turn.wait > deadline:
            return _outcome(False, now - began, held)
        yield turn.wait


def _outcome(taken: bool, waited: float, held: Turn | None) -> Outcome:
    if held is None:
        return Outcome(taken, 0.0)
    return Outcome(taken, waited, held.bucket, held.reason, 0.0 if taken else held.wait)


def await_turn(
    store: EventStore,
    scopes: Sequence[Scope],
    call: Call,
    deadline: float,
    clock: Clock = time.time,
) -> Outcome:
    """Block until the call's turn (taken) or until waiting would pass `deadline` (epoch s).

    Raises:
        StoreError: the store cannot be reached or written.
    """
    asking = _asking(store, scopes, call, deadline, clock)
    while isinstance(step := _step(asking), float):
        time.sleep(step)
    return step


async def await_turn_async(
    store: EventStore,
    scopes: Sequence[Scope],
    call: Call,
    deadline: float,
    clock: Clock = time.time,
) -> Outcome:
    """`await_turn` on an event loop: the store is asked on a thread, the waits are awaited."""
    asking = _asking(store, scopes, call, deadline, clock)
    while isinstance(step := await asyncio.to_thread(_step, asking), float):
        await asyncio.sleep(step)
    return step


def _step(asking: Generator[float, None, Outcome]) -> float | Outcome:
    """The next wait, or the outcome once asking is over."""
    try:
        return next(asking)
    except StopIteration as done:
        outcome: Outcome = done.value
        return outcome


def refused_for(status: int, headers: Mapping[str, str]) -> float | None:
    """The `retry-after` seconds of a provider's 429 (None: no 429, or it named no wait)."""
    if status != TOO_MANY_REQUESTS:
        return None
    seen = answer_quota(headers)
    return seen.retry_after_seconds if seen is not None else None


def hold_back(
    store: EventStore, keys: Sequence[str], seconds: float, clock: Clock = time.time
) -> None:
    """Block the buckets for `seconds`: a provider refused a call sent under them.

    Raises:
        StoreError: the store cannot be reached or written.
    """
    block(store, keys, clock() + seconds)
