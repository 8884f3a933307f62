"""Tools for trying tickwork without a model server: the fake upstream and the example file.

It owns the fake upstream that tests, benchmarks and `make run` talk to, in the four
wire formats a tick can speak (`harness.devtools.fake_llm`), the in-thread ASGI server
it runs on (`serving`), and the commented `tickwork.toml` that `tickwork init` writes.
Only the example is re-exported: the fake upstream and the server import FastAPI and uvicorn, which
`tickwork init` must not pay for; import them from their modules.
"""

from __future__ import annotations

from harness.devtools.example_config import example_config

__all__ = ["example_config"]
