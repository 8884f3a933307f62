"""A local HTTP endpoint for apprise's `json://` notifications, on a real socket."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Received = list[dict[str, Any]]


@contextmanager
def http_receiver(take: Callable[[str, bytes], None], failures: int = 0) -> Iterator[str]:
    """`host:port` of a local server handing each POST's path and body to `take`.

    Its first `failures` requests get a 500 and are not taken.
    """
    left = [failures]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if left[0] > 0:
                left[0] -= 1
                self.send_response(500)
            else:
                take(self.path, body)
                self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@contextmanager
def apprise_receiver(failures: int = 0) -> Iterator[tuple[str, Received]]:
    """(a `json://` URL, the bodies it took); its first `failures` requests get a 500."""
    received: Received = []
    with http_receiver(lambda path, body: received.append(json.loads(body)), failures) as where:
        yield f"json://{where}/alerts", received
