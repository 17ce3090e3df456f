"""``awa_bench --telemetry``: what OpenTelemetry costs the drain.

"On" registers an :class:`~awa_django.observability.otel.OtelObserver` on
SDK providers of its own, set up the way a deployment would: spans go
through a ``BatchSpanProcessor`` and metrics through a periodic reader,
both to exporters that discard what they get, so recording, batching and
export hand-off are paid for and only the network is left out.  "Off"
registers no OpenTelemetry observer at all (the one the app installed, if
any, is set aside).  ``both`` drains the same number of jobs each way,
in alternating rounds so that drift of a busy machine hits both, and
reports throughput with telemetry on over throughput with it off, and the
CPU time this process spent per job each way (what telemetry adds to a
job, less sensitive to a machine shared with other work than throughput).

The tracer provider samples as the SDK's environment variables say
(``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``; by default every
trace is recorded), so the cost of a production sampling rate can be
measured too, e.g. ``OTEL_TRACES_SAMPLER=parentbased_traceidratio
OTEL_TRACES_SAMPLER_ARG=0.1``.

Needs ``opentelemetry-sdk`` (the ``otel`` extra); imported only when
``--telemetry`` asks for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from rich.progress import Progress

from awa_django.management.bench import BenchOptions, bulk_enqueue, drain
from awa_django.observability.hooks import observers
from awa_django.observability.otel import OtelObserver

from . import alternate, compared_stage

#: Drain rounds per side with ``--telemetry both`` (off/on, then on/off, ...).
ROUNDS = 2
#: How often the periodic reader collects and exports metrics while "on".
METRIC_EXPORT_MS = 1000


class DiscardSpans(SpanExporter):
    """Accepts every batch and drops it, counting the spans."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class DiscardMetrics(MetricExporter):
    """Accepts every collection and drops it, counting the exports."""

    def __init__(self) -> None:
        super().__init__()
        self.exports = 0

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.exports += 1
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


@dataclasses.dataclass
class Recording:
    """What one "on" stretch exported."""

    spans: DiscardSpans
    metrics: DiscardMetrics
    #: The tracer provider's sampler, as the SDK describes it.
    sampler: str


@contextlib.contextmanager
def without_otel() -> Iterator[None]:
    """No OpenTelemetry observer registered while the block runs."""
    installed = [o for o in observers if isinstance(o, OtelObserver)]
    for observer in installed:
        observers.remove(observer)
    try:
        yield
    finally:
        for observer in installed:
            observers.add(observer)


@contextlib.contextmanager
def recording() -> Iterator[Recording]:
    """An OtelObserver on SDK providers with discarding exporters, registered
    (alone) while the block runs; the providers are flushed and shut down at
    its end, inside the block's time."""
    spans, metrics = DiscardSpans(), DiscardMetrics()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(spans))
    reader = PeriodicExportingMetricReader(metrics, export_interval_millis=METRIC_EXPORT_MS)
    meter_provider = MeterProvider(metric_readers=[reader])
    observer = OtelObserver(tracer_provider=tracer_provider, meter_provider=meter_provider)
    with without_otel():
        observers.add(observer)
        try:
            yield Recording(spans, metrics, tracer_provider.sampler.get_description())
        finally:
            observers.remove(observer)
            tracer_provider.shutdown()
            meter_provider.shutdown()


def drain_compared(options: BenchOptions) -> dict[str, Any]:
    """Drain ``options.jobs`` no-op jobs with telemetry off and on, ``ROUNDS``
    times each, alternating; returns both throughputs, on/off and the CPU
    time per job each way."""
    cpu = {"off": 0.0, "on": 0.0}
    jobs = {"off": 0, "on": 0}
    exported: dict[str, Any] = {"spans": 0, "metric_exports": 0, "sampler": ""}

    def run_side(side: str) -> dict[str, Any]:
        bulk_enqueue(options)
        began = time.process_time()
        if side == "on":
            with recording() as record:
                result = drain(options)
            exported["spans"] += record.spans.spans
            exported["metric_exports"] += record.metrics.exports
            exported["sampler"] = record.sampler
        else:
            with without_otel():
                result = drain(options)
        cpu[side] += time.process_time() - began
        jobs[side] += int(result["jobs"])
        return result

    rates = alternate(ROUNDS, ("off", "on"), run_side)
    cpu_us = {side: cpu[side] / jobs[side] * 1e6 for side in cpu}
    return {
        "rounds": ROUNDS,
        "jobs_per_round": options.jobs,
        "off_jobs_per_s": round(rates["off"]),
        "on_jobs_per_s": round(rates["on"]),
        "on_over_off": round(rates["on"] / rates["off"], 3),
        "off_cpu_us_per_job": round(cpu_us["off"], 1),
        "on_cpu_us_per_job": round(cpu_us["on"], 1),
        "sampler": exported["sampler"],
        "spans_exported": exported["spans"],
        "metric_exports": exported["metric_exports"],
    }


def stage(options: BenchOptions, results: dict[str, Any], progress: Progress) -> None:
    """``--telemetry both``: the drain with telemetry off and on, alternately;
    fills ``results["telemetry"]``."""
    compared_stage(
        progress,
        results,
        "telemetry",
        f"drain {options.jobs} jobs off and on, {ROUNDS} rounds each",
        lambda: drain_compared(options),
        ("on_over_off", "on/off"),
    )
