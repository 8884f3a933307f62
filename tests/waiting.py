"""Waiting for an event or a state instead of sleeping for a guess.

The deadline only fails a truly broken run: on a machine whose cores are shared by
several test suites a slow run still passes, and a wait ends the moment the thing
happens, so a generous deadline costs nothing on a quick one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_SECONDS = 120.0


def wait_until(
    check: Callable[[], T], what: str, timeout: float = DEADLINE_SECONDS, interval: float = 0.1
) -> T:
    """Call `check` until it returns something truthy, and return that.

    Raises:
        AssertionError: naming `what`, when `timeout` seconds pass first.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(interval)


def long_enough(
    attempt: Callable[[float], T], arose: Callable[[T], bool], first: float, cap: float
) -> T:
    """Run `attempt` with a deadline of `first` seconds, doubled until the case under test arose.

    A test of what a product does at a deadline (a timeout, a TTL, an outage) waits that
    deadline out, so one chosen long enough for a loaded machine makes every quiet run
    slow. Here it starts short, and only when the attempt's own recorded facts show the
    machine was too slow for it (`arose` is false: the deadline came before the case it
    tests did) is the attempt made again with twice the time, never from timing the test
    itself. The attempt at `cap` is returned whatever `arose` says, for the test's
    assertions to judge, so a product that never brings the case about still fails.
    """
    deadline = first
    while True:
        outcome = attempt(deadline)
        if deadline >= cap or arose(outcome):
            return outcome
        longer = min(2 * deadline, cap)
        print(f"the case under test did not arise within {deadline:g} s: again with {longer:g} s")
        deadline = longer
