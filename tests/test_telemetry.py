"""Optional OpenTelemetry export: a tick's spans reach an OTLP/HTTP receiver when one is set."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from harness.devtools.fake_llm import FakeUpstream, Step
from tests.tick_support import Harness


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """A local OTLP/HTTP endpoint that accepts every export: (URL, (path, body) received)."""
    received: list[tuple[str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            received.append((self.path, body))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()


def test_a_ticks_spans_reach_the_otlp_receiver_only_when_an_endpoint_is_set(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    with otlp_receiver() as (url, received):
        plain = harness.tick([Step(text="untraced")])
        assert plain.status == "completed" and received == []
        harness.runner.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = url
        traced = harness.tick([Step(text="traced")])
    assert traced.status == "completed"
    assert received and {path for path, _ in received} == {"/v1/traces"}
    spans = b"".join(body for _, body in received)
    assert traced.tick_id.encode() in spans, "spans carry the tick's id"
    assert b"chat" in spans or b"invoke_agent" in spans
