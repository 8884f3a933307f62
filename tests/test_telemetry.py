"""Optional OpenTelemetry export: a tick's spans reach an OTLP/HTTP receiver when one is set."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.devtools.fake_llm import FakeUpstream, Step
from tests.receiver import http_receiver
from tests.tick_support import Harness


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """A local OTLP/HTTP endpoint that accepts every export: (URL, (path, body) received)."""
    received: list[tuple[str, bytes]] = []
    with http_receiver(lambda path, body: received.append((path, body))) as where:
        yield f"http://{where}", received


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
