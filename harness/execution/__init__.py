"""Execution: a claimed tick waits for a place, gets its payload, runs and ends.

It owns the queue (`Gate`: global and per-level caps, priorities, spaced starts), the
preparation of a tick's payload and prompt, the runner (attempts, retries, supervision,
the terminal event with the parsed result), the adoption of ticks a killed predecessor
left running, and two plug-in families with fronts of their own: `executors` (where
claimed ticks wait and run) and `launchers` (how a tick process starts).
"""

from __future__ import annotations

from harness.execution.prepare import PreparedTick, Preparer, TickSetupError, new_tick_id
from harness.execution.queue import Gate
from harness.execution.runner import Runner, TickOutcome

__all__ = [
    "Gate",
    "PreparedTick",
    "Preparer",
    "Runner",
    "TickOutcome",
    "TickSetupError",
    "new_tick_id",
]
