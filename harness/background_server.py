"""A uvicorn server on a real socket, in a background thread of this process.

Tests and `tickwork tick` talk to real HTTP servers (the fake upstream, the API) without a
second process to start, wait for and clean up.
"""

from __future__ import annotations

import threading
import time

import uvicorn
from starlette.types import ASGIApp


class BackgroundServer:
    def __init__(self, app: ASGIApp, name: str, host: str = "127.0.0.1", port: int = 0) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=name, daemon=True)
        self.url = ""
        """`http://host:port`, once started."""

    def start(self) -> str:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"{self._thread.name}: the server did not start")
            time.sleep(0.01)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(5)
