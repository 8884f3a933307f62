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
