"""One scheduler and several `tickwork worker`s on one PostgreSQL store, as separate hosts run.

Shared by the procrastinate executor's tests and its benchmark (`ops/bench/`): a migrated
database with procrastinate's schema, the processes with their output read as it comes,
and the tick streams read back whole to check once-each.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.contracts.events import TERMINAL_TYPES
from harness.devtools.fake_llm import FakeUpstream
from harness.store import SqlEventStore, StoredEvent
from tests.commands import Output, forked_cli, start, write_config

EXECUTOR = """
[executor]
kind = "procrastinate"
stalled_seconds = {stalled}
"""


def level(name: str, every: str, cap: int | None = None, timeout: int = 60, extra: str = "") -> str:
    """A level whose ticks may overlap, optionally capped at `cap` running at once."""
    capped = f"max_concurrent = {cap}" if cap is not None else ""
    return f"""
[levels.{name}]
every = "{every}"
overlap = "allow"
prompt = "Anything new?"
model = "fake-model"
timeout_seconds = {timeout}
{capped}
{extra}
"""


def configure(
    tmp_path: Path,
    url: str,
    levels: str,
    fake: FakeUpstream,
    stalled: float = 30.0,
    runner: str = "",
) -> Path:
    """A procrastinate tickwork.toml on `url`, migrated with `tickwork migrate`."""
    config = write_config(
        tmp_path, levels + EXECUTOR.format(stalled=stalled), runner=runner, store_url=url
    )
    migrated = forked_cli("migrate", config, fake)
    assert migrated.returncode == 0, migrated.stderr
    assert "procrastinate's schema" in migrated.stdout, migrated.stdout
    return config


@contextmanager
def processes(
    config: Path,
    fake: FakeUpstream,
    workers: int,
    concurrency: int = 2,
    scheduler: bool = True,
    workers_first: bool = False,
) -> Iterator[tuple[Output | None, list[Output]]]:
    """`tickwork run` (if asked) and `workers` workers; all are stopped when the block ends.

    They start together, as their start-ups take seconds on a busy machine: jobs the
    scheduler defers first wait in the queue for the first worker up. `workers_first`:
    the scheduler starts once every worker is up, so that each finds its first jobs.
    """
    with ExitStack() as stack:
        started: list[Output] = []

        def launch(command: str) -> Output:
            process = start(command, config, fake, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            output = Output(process)
            started.append(output)
            stack.callback(_stop, output)
            return output

        def up() -> None:
            for worker in pool:
                worker.wait_for("tickwork worker on")

        pool = [launch(f"worker --concurrency {concurrency}") for _ in range(workers)]
        if workers_first:
            up()
        service = launch("run") if scheduler else None
        if not workers_first:
            up()
        try:
            yield service, pool
        except BaseException:
            # What each process said so far, shown with the failure: a wait that ran out
            # says only what it waited for.
            for output in started:
                print(f"--- tickwork {' '.join(output.process.args[1:])}:\n{output.text()}")
            raise


def _stop(output: Output) -> None:
    if output.process.poll() is None:
        output.stop()


@dataclass
class Ticks:
    """Every tick stream of the store, by tick id."""

    streams: dict[str, list[StoredEvent]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def read(cls, store: SqlEventStore) -> Ticks:
        ticks = cls()
        position = 0
        while batch := store.read_all(position, 10_000):
            for event in batch:
                if event.stream_id.startswith("tick-"):
                    ticks.streams[event.stream_id.removeprefix("tick-")].append(event)
            position = batch[-1].global_position
        return ticks

    def of(self, kind: str) -> dict[str, list[StoredEvent]]:
        return {
            tick: [e for e in events if e.type == kind] for tick, events in self.streams.items()
        }

    def terminals(self) -> dict[str, list[str]]:
        return {
            tick: [e.type for e in events if e.type in TERMINAL_TYPES]
            for tick, events in self.streams.items()
        }

    def ended(self) -> bool:
        return bool(self.streams) and all(len(t) >= 1 for t in self.terminals().values())
