"""Execution: a claimed tick waits for a place, gets its payload, runs and ends.

It owns the queue (`Gate`: global and per-level caps, priorities, spaced starts), the
preparation of a tick's payload and prompt, the runner (attempts, retries, supervision,
the terminal event with the parsed result), the adoption of ticks a killed predecessor
left running, and two plug-in families with fronts of their own: `executors` (where
claimed ticks wait and run) and `launchers` (how a tick process starts), and the manual
ticks an operator starts, owned by the caller or by a process of their own (`detached`,
`tickwork tick --no-wait`). Other parts import all of it from here: every name is loaded
on first use (`harness.fronts`), so `tickwork status` asking for the procrastinate
workers loads neither the runner nor a launcher.
"""

from __future__ import annotations

import typing

from harness import fronts

if typing.TYPE_CHECKING:
    from harness.execution.agent_clis import agent_cli_states
    from harness.execution.detached import start_detached
    from harness.execution.executors.base import HandoffExecutor
    from harness.execution.executors.local import LocalExecutor
    from harness.execution.executors.procrastinate.jobs import workers
    from harness.execution.executors.procrastinate.loop import WorkerLoop
    from harness.execution.executors.procrastinate.scheduler import ProcrastinateExecutor
    from harness.execution.executors.procrastinate.worker import places_needed
    from harness.execution.launchers.cold import ColdLauncher
    from harness.execution.manual import ManualTick, ManualTicks
    from harness.execution.prepare import PreparedTick, Preparer, TickSetupError, new_tick_id
    from harness.execution.queue import Gate
    from harness.execution.runner import Runner, TickOutcome

__getattr__, __all__ = fronts.declared(__name__)
