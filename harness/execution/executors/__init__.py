"""Where claimed ticks run: local threads today, procrastinate jobs on other hosts later."""

from harness.execution.executors.base import Executor
from harness.execution.executors.local import LocalExecutor

__all__ = ["Executor", "LocalExecutor"]
