"""The HTTP API app on a real port, over a store, with the settings the API tests share."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from pydantic import SecretStr

from harness.api.app import create_app
from harness.config import ApiConfig, DigestConfig, LevelConfig, PathsConfig, Settings, StoreConfig
from harness.devtools.serving import BackgroundServer
from harness.devtools.upstream import env_for_ticks
from harness.execution.manual import ManualTicks
from harness.store import SqlEventStore
from tests import web

TOKEN = "tw-test-token-4f1d0c"


@contextmanager
def serving(
    settings: Settings, store: SqlEventStore, manual: ManualTicks | None = None
) -> Iterator[httpx.Client]:
    """The app over `store` on a real port, and a client for it.

    `manual`: the run-now button's owner (default: its ticks get a fake upstream each).
    """
    manual = manual or manual_ticks(settings, store)
    server = BackgroundServer(create_app(settings, store, manual), name="api")
    try:
        # The process's one TLS context: a client's own loads the CA bundle (28 ms of CPU).
        with web.Client(base_url=server.start(), timeout=30) as client:
            yield client
    finally:
        server.stop()


def manual_ticks(settings: Settings, store: SqlEventStore) -> ManualTicks:
    """The run-now button's owner, its ticks talking to a fake upstream of their own."""
    return ManualTicks(
        settings, store, upstream=lambda: env_for_ticks(lambda line: None), router=None
    )


def settings_for(url: str, tmp_path: Path, token: str | None = None) -> Settings:
    return Settings(
        store=StoreConfig(url=url),
        paths=PathsConfig(results=tmp_path / "results", spool=tmp_path / "spool"),
        api=ApiConfig(token=SecretStr(token) if token else None),
        digests={"daily": DigestConfig(every="1d")},
        levels={
            "min": LevelConfig(every="1m", model="gpt-4o-mini", daily_token_budget=100_000),
            "hour": LevelConfig(schedule="0 * * * *", model="gpt-4o-mini"),
        },
    )
