"""A span exporter that redacts every span it hands on: spans are text leaving the host.

An upstream's error quoting the key lands in a span's status and exception event, a
tool's output in its attributes. They are redacted on their way to the exporter, as the
event encoding and the result file writer redact theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link, Status
from opentelemetry.util.types import Attributes, AttributeValue

from harness.contracts import redact


class RedactingExporter(SpanExporter):
    """Hands `exporter` each span with every secret value taken out of its text."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export the spans redacted."""
        return self.exporter.export([redacted_span(span) for span in spans])

    def shutdown(self) -> None:
        """Shut the exporter underneath down."""
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the exporter underneath."""
        return self.exporter.force_flush(timeout_millis)


def redacted_span(span: ReadableSpan) -> ReadableSpan:
    """A copy of `span` whose name, attributes, events, links and status are redacted.

    The status and the events (an exception's message and stack, a message's content)
    are prose: a short secret standing as a word is replaced there too.
    """
    status = span.status
    if status.description:
        status = Status(status.status_code, redact(status.description, words=True))
    return ReadableSpan(
        name=redact(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_attributes(span.attributes, prose=False),
        events=[
            Event(event.name, _attributes(event.attributes, prose=True), event.timestamp)
            for event in span.events
        ],
        links=[Link(link.context, _attributes(link.attributes, False)) for link in span.links],
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def _attributes(values: Attributes, prose: bool) -> Attributes:
    if not values:
        return values
    return {key: _redacted(value, prose) for key, value in values.items()}


def _redacted(value: AttributeValue, prose: bool) -> AttributeValue:
    if isinstance(value, str):
        return redact(value, words=prose)
    if isinstance(value, Sequence) and value and isinstance(value[0], str):
        return [redact(item, words=prose) for item in value]  # type: ignore[arg-type]
    return value
