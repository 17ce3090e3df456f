"""An :class:`OtelObserver` recording into SDK providers of its own, for tests.

The global OpenTelemetry providers can be set once per process, so each
test builds its own providers (an in-memory span exporter behind a simple
processor, an in-memory metric reader), passes them to the observer and
registers it in place of the one the app installed; the fixture restores
that one afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider

from awa_django.observability.otel import OtelObserver


@dataclass
class Telemetry:
    observer: OtelObserver
    spans_exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider

    @property
    def tracer(self) -> Any:
        return self.tracer_provider.get_tracer("tests")

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.spans_exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def points(self, name: str) -> list[Any]:
        """Every data point of metric ``name`` (all scopes), as last collected."""
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def value(self, name: str, **attributes: Any) -> Any:
        """The sum (counters), count (histograms) or value (gauges) of the one
        point of ``name`` with exactly ``attributes``; None when there is none."""
        matching = [p for p in self.points(name) if dict(p.attributes) == attributes]
        if not matching:
            return None
        [point] = matching
        for field in ("count", "value"):
            if hasattr(point, field):
                return getattr(point, field)
        raise AssertionError(f"unexpected point {point!r}")


def build(*, trace_capture: bool = True, spans: bool = True) -> Telemetry:
    """An observer on SDK providers; ``spans=False``: metrics only (the
    tracer provider is the API's no-op one, as when no SDK tracing is set up)."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    observer = OtelObserver(
        trace_capture=trace_capture,
        tracer_provider=tracer_provider if spans else NoOpTracerProvider(),
        meter_provider=meter_provider,
    )
    return Telemetry(observer, exporter, reader, tracer_provider)
