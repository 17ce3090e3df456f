"""The SDK set-up of the telemetry how-to (run by tests/observability/test_docs_telemetry.py)."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter


# [providers]
def sdk_providers(
    service: str, spans: SpanExporter, metrics: MetricReader
) -> tuple[TracerProvider, MeterProvider]:
    """This process's SDK providers: spans batched to ``spans``, metrics read by ``metrics``."""
    resource = Resource.create({"service.name": service})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(spans))
    meter_provider = MeterProvider(resource=resource, metric_readers=[metrics])
    return tracer_provider, meter_provider


# [/providers]


# [configure]
def configure_telemetry(service: str) -> None:
    """Export this process's spans and metrics over OTLP/HTTP (once per process)."""
    from opentelemetry import metrics, trace
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    tracer_provider, meter_provider = sdk_providers(
        service, OTLPSpanExporter(), PeriodicExportingMetricReader(OTLPMetricExporter())
    )
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)


# [/configure]
