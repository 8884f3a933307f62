"""An ASGI app on a real socket in a background thread: a tick's own governor, the fake."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class BackgroundServer:
    """Serves an ASGI app from a thread of this process, so a test needs no child process."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, name: str = "server"
    ) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name=name, daemon=True)
        self.name = name
        self.origin = ""
        """`http://host:port` once started."""

    def start(self) -> str:
        """Start serving and wait until the socket listens; returns the origin to connect to."""
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the {self.name} did not start")
            time.sleep(0.01)
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.origin = f"http://{host}:{port}"
        return self.origin

    def stop(self) -> None:
        """Ask the server to exit and wait for its thread.

        Requests still in flight after a second are cancelled (`timeout_graceful_shutdown`):
        a fake upstream's scripted delay may run for minutes, and uvicorn would wait for it,
        so the join gave up after 5 s instead, with the thread still serving.
        """
        self._server.should_exit = True
        self._thread.join(5)
