"""The upstream a tick talks to: the configured one, or the fake one for a try without a server.

Every process that owns ticks (`tickwork run`, `tick`, `worker`, `serve`'s run-now button)
gives its ticks the same environment through here. The fake upstream (FastAPI, uvicorn)
is imported only when it is needed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from harness.contracts.secrets import API_KEY_ENV


@contextmanager
def upstream_for_ticks(warn: Callable[[str], None]) -> Iterator[dict[str, str]]:
    """The worker environment: the real upstream if OPENAI_BASE_URL is set, else the fake.

    `warn` is told of a setup that will fail every call, and of the fake upstream's address.
    """
    if os.environ.get("OPENAI_BASE_URL"):
        if not os.environ.get(API_KEY_ENV):
            warn(
                f"warning: OPENAI_BASE_URL is set but {API_KEY_ENV} is not: "
                "an upstream that needs a key will refuse every call"
            )
        yield dict(os.environ)
        return
    from harness.devtools.fake_llm import fake_upstream

    with fake_upstream() as fake:
        warn(f"no OPENAI_BASE_URL set: ticks talk to tickwork's fake upstream at {fake.url}")
        yield {**os.environ, "OPENAI_BASE_URL": fake.url}
