"""Optional OpenTelemetry export: a tick's spans reach an OTLP/HTTP receiver when one is set.

What the receiver gets is what leaves the host, so the tests read the exported spans: no
secret may stand in any of them, and a `can_shell` tick's commands see no `OTEL_*`
setting (collector headers carry tokens) although its worker exports with them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from harness.devtools.fake_llm import FakeUpstream, Step, ToolCallSpec
from tests.receiver import http_receiver
from tests.tick_support import SECRET, Harness

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
COLLECTOR_TOKEN = "otel-collector-SECRET-5a9d3e"


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, bytes]]]]:
    """A local OTLP/HTTP endpoint that accepts every export: (URL, (path, body) received)."""
    received: list[tuple[str, bytes]] = []
    with http_receiver(lambda path, body: received.append((path, body))) as where:
        yield f"http://{where}", received


def exported_strings(received: list[tuple[str, bytes]]) -> list[str]:
    """Every string of every exported span: names, attributes, events, links and statuses."""
    strings: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, str):
            strings.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for _, body in received:
        walk(MessageToDict(ExportTraceServiceRequest.FromString(body)))
    return strings


def test_a_ticks_spans_reach_the_otlp_receiver_only_when_an_endpoint_is_set(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    with otlp_receiver() as (url, received):
        plain = harness.tick([Step(text="untraced")])
        assert plain.status == "completed" and received == []
        harness.runner.env[ENDPOINT_ENV] = url
        traced = harness.tick([Step(text="traced")])
    assert traced.status == "completed"
    assert received and {path for path, _ in received} == {"/v1/traces"}
    spans = b"".join(body for _, body in received)
    assert traced.tick_id.encode() in spans, "spans carry the tick's id"
    assert b"chat" in spans or b"invoke_agent" in spans


def test_a_key_quoted_by_the_upstream_stands_in_no_exported_span(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False)
    with otlp_receiver() as (url, received):
        harness.runner.env[ENDPOINT_ENV] = url
        outcome = harness.tick([Step(status=401, error_message="Incorrect API key: {key}.")])
    assert outcome.status == "failed"
    strings = exported_strings(received)
    assert not [text for text in strings if SECRET in text]
    assert SECRET.encode() not in b"".join(body for _, body in received)
    quoted = [text for text in strings if "Incorrect API key: [redacted:OPENAI_API_KEY]" in text]
    assert quoted, "the error is exported, the key is not"


def test_a_shell_ticks_commands_see_no_telemetry_setting_its_worker_exports_with(
    tmp_path: Path, fake: FakeUpstream
) -> None:
    harness = Harness(tmp_path, fake, rag=False, can_shell=True)
    read_env = Step(tool_calls=[ToolCallSpec(name="shell", arguments={"command": "env"})])
    with otlp_receiver() as (url, received):
        harness.runner.env.update(
            {
                ENDPOINT_ENV: url,
                "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {COLLECTOR_TOKEN}",
                "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=night-shift",
            }
        )
        outcome = harness.tick([read_env, Step(text="done")])
    assert outcome.status == "completed", outcome.reason
    told = str(fake.state.received[-1]["messages"])
    assert "OPENAI_BASE_URL" in told, "the shell's output reached the model"
    assert "OTEL_" not in told and COLLECTOR_TOKEN not in told
    strings = exported_strings(received)
    assert outcome.tick_id in strings and "night-shift" in strings, "the worker exported"
    assert not [text for text in strings if COLLECTOR_TOKEN in text]
