"""`tickwork run` at 720 slots a minute on PostgreSQL with a pool smaller than its threads."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.devtools.fake_llm import FakeUpstream
from harness.store import open_store
from tests.commands import Output, start
from tests.load_support import LEVELS, Load, answer_slowly, load_config
from tests.waiting import wait_until

POOL = 6
"""Connections of the service's pool: fewer than its 16 tick threads and its own."""


@pytest.mark.long
def test_a_loaded_service_on_postgresql_ends_every_tick_once_and_books_the_bill(
    tmp_path: Path, truncated_pg_url: str, fake: FakeUpstream
) -> None:
    """A wave of 60 ticks, 16 starting at once, each folding its calibrations first.

    No thread waits for a connection another of its own transactions holds, none dies,
    and the stop lets the running ticks finish, so spend is the bill to the token.
    """
    answer_slowly(fake, 10 * LEVELS)
    config = load_config(tmp_path, truncated_pg_url, connections=POOL)
    service = Output(start("run", config, fake, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    store = open_store(truncated_pg_url)
    try:
        wait_until(
            lambda: Load.read(store, fake).completed >= LEVELS,
            "a wave of ticks completed",
            timeout=180,
            interval=0.5,
        )
        output = service.stop()
        load = Load.read(store, fake)
    finally:
        store.close()
    assert service.process.returncode == 0, output
    assert output.count("Exception in thread") == 0, output
    assert "Traceback" not in output, output
    assert load.ended_once == load.ticks, load
    assert load.completed >= LEVELS, load
    assert load.spent_tokens == load.billed_tokens > 0, load
