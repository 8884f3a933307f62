"""Where claimed ticks run: local threads, or procrastinate jobs on any host (imported apart)."""

from harness.execution.executors.base import Executor, HandoffExecutor
from harness.execution.executors.local import LocalExecutor

__all__ = ["Executor", "HandoffExecutor", "LocalExecutor"]
