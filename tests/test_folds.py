"""Fold workers: lean to start, no secret in their argv, their failures raised in the parent."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from uuid import uuid4

import psutil
import pytest

from harness.folds.parallel import FoldWorkerError, Workers
from harness.folds.ranges import Database, RangeQuery
from harness.folds.spend import spend_sums
from harness.folds.sums import Kernel
from harness.store import NewEvent, SqlEventStore, open_store

SELECT = "SELECT data FROM events WHERE global_position > ? AND global_position <= ? AND type = ?"
KERNEL = Kernel(spend_sums, ((100_000,),))
SPENT = {
    "occurred_at": "2026-11-30T02:14:50Z",
    "level": "min",
    "model": "gpt-4o-mini",
    "completion_tokens": 1,
    "cache_read_tokens": None,
    "cache_write_tokens": None,
    "estimated": False,
}


def seed(store: SqlEventStore, count: int) -> list[int]:
    """`count` BudgetSpent events; their positions."""
    return [
        position
        for i in range(count)
        for position in store.append(
            "tick-t", [NewEvent(uuid4(), "BudgetSpent", 1, {**SPENT, "prompt_tokens": 1000 * i})]
        ).positions
    ]


def spent_in(database: Database, after: int, upper: int) -> RangeQuery:
    return RangeQuery(database, SELECT, (after, upper, "BudgetSpent"))


def test_a_worker_imports_neither_the_store_nor_pydantic_nor_the_price_tables() -> None:
    script = (
        "import json, sys\n"
        "import harness.folds.worker, harness.folds.spend\n"
        "heavy = ('sqlalchemy', 'pydantic', 'genai_prices', 'harness.store', 'harness.config')\n"
        "print(json.dumps([name for name in heavy if name in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    assert json.loads(done.stdout) == []


def test_a_worker_gets_the_store_password_over_its_pipe_never_in_argv_or_environment(
    pg_store: SqlEventStore,
) -> None:
    url = pg_store.engine.url.set(password="fold-s3cret")  # trust auth: any password will do
    store = open_store(url.render_as_string(hide_password=False))
    try:
        positions = seed(store, 6)
        database = store.worker_database()
        assert database.password == "fold-s3cret" and "fold-s3cret" not in repr(database)
        with Workers(1, "postgresql") as workers:
            (worker,) = (psutil.Process(pid) for pid in workers.pids)
            seen = " ".join([*worker.cmdline(), *worker.environ().values()])
            assert "fold-s3cret" not in seen
            sums, folded = workers.fold(
                KERNEL,
                [
                    spent_in(database, 0, positions[2]),
                    spent_in(database, positions[2], positions[-1]),
                ],
            )
    finally:
        store.close()
    assert folded == 6
    key = ("min", "gpt-4o-mini", "2026-11-30", 0, "", "", "", "api")
    assert sums == {key: [15_000, 6, 0, 0, 6, 0, 0, 0, 0]}


def test_what_a_worker_raises_is_raised_in_the_parent_with_its_pid(tmp_path: object) -> None:
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    try:
        last = seed(store, 3)[-1]
        database = store.worker_database()
        broken = RangeQuery(database, "SELECT data FROM nowhere", ())
        with (
            pytest.raises(sqlite3.OperationalError, match="no such table") as raised,
            Workers(1, "sqlite") as workers,
        ):
            workers.fold(KERNEL, [spent_in(database, 0, last), broken])
        assert any("in fold worker" in note for note in raised.value.__notes__)
    finally:
        store.close()


def test_a_worker_that_dies_is_reported_not_waited_for(tmp_path: object) -> None:
    store = open_store(f"sqlite:///{tmp_path}/events.db")
    try:
        positions = seed(store, 3)
        database = store.worker_database()
        with pytest.raises(FoldWorkerError, match="no result"), Workers(1, "sqlite") as workers:
            for pid in workers.pids:
                psutil.Process(pid).kill()
            workers.fold(
                KERNEL,
                [
                    spent_in(database, 0, positions[0]),
                    spent_in(database, positions[0], positions[-1]),
                ],
            )
    finally:
        store.close()
