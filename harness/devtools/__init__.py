"""Tools for trying tickwork without a model server: the fake upstream and the example file.

It owns the fake upstream that tests, benchmarks and `make run` talk to, in the four
wire formats a tick can speak (`harness.devtools.fake_llm`), the in-thread ASGI server
it runs on (`serving`), and the commented `tickwork.toml` that `tickwork init` writes.
The example is imported with the front; every other name is loaded on first use
(`harness.fronts`): the fake upstream and the server import FastAPI and uvicorn, which
`tickwork init` must not pay for.
"""

from __future__ import annotations

import typing

from harness import fronts
from harness.devtools.example_config import example_config

if typing.TYPE_CHECKING:
    from harness.devtools.fake_llm.server import create_app
    from harness.devtools.upstream import (
        TickUpstream,
        env_for_ticks,
        service_fake,
        upstream_for_ticks,
    )

__getattr__, __all__ = fronts.declared(__name__)
