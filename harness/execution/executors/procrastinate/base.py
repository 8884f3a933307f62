"""What both sides of the procrastinate executor share: their jobs live in the store's database."""

from __future__ import annotations

from harness.config import Settings
from harness.execution.executors.base import Ended, Executor, Report
from harness.execution.prepare import Preparer
from harness.execution.runner import Runner
from harness.store import EventStore


class OnStore(Executor):
    """An executor that reads and writes procrastinate's jobs through the store it is given."""

    def __init__(
        self,
        settings: Settings,
        store: EventStore,
        preparer: Preparer,
        runner: Runner,
        report: Report,
        ended: Ended | None = None,
    ) -> None:
        self.store = store
        """Where the jobs live, beside the events."""
        super().__init__(settings, preparer, runner, report, ended)
