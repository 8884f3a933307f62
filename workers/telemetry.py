"""Optional OpenTelemetry export of a tick's spans, sent over OTLP/HTTP.

Strands emits the spans (the agent, each model call, each tool call); this only exports
them, tagged with the tick's id and level. Off unless the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` is set (the exporter reads it and the other `OTEL_*`
variables itself). Spans are batched, so they are flushed before the tick's process
ends: a forked tick leaves without running exit handlers.

Spans are redacted on their way to the exporter (`workers.span_redaction`). The `OTEL_*`
settings (the collector's headers carry its token) leave the environment once the
exporter has read them, so no tool's command inherits them.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from harness.contracts import TELEMETRY_PREFIX, withhold_environment

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
FLUSH_MILLIS = 5000


_flushes: list[Callable[[], None]] = []
"""The flush of this process's exporter, once one is set up."""


def start_tracing() -> Callable[[], None]:
    """Export this process's spans if an endpoint is set; returns what flushes them.

    At most once per process, as the global tracer provider can be set only once: a tick
    forked from a warm fork server that set one up keeps it (OpenTelemetry restarts its
    export thread in the child); one whose server had no endpoint sets up its own. Either
    way the `OTEL_*` settings are withheld from the processes this one starts.
    """
    if not _flushes and os.environ.get(ENDPOINT_ENV):
        os.environ.setdefault("OTEL_SERVICE_NAME", "tickwork")
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from strands.telemetry import StrandsTelemetry, get_tracer

        from workers.span_redaction import RedactingExporter

        provider = StrandsTelemetry().tracer_provider
        provider.add_span_processor(BatchSpanProcessor(RedactingExporter(OTLPSpanExporter())))
        get_tracer()  # Strands' tracer reads its own OTEL_* options once, here

        def flush() -> None:
            provider.force_flush(FLUSH_MILLIS)

        _flushes.append(flush)
    withhold_environment(TELEMETRY_PREFIX)
    return _flushes[0] if _flushes else lambda: None
