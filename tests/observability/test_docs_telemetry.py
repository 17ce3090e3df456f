"""The telemetry how-to: its SDK set-up, for real, and its generated metric list."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from testapp import jobs

from awa_django.observability.hooks import observers
from awa_django.observability.otel import OtelObserver
from docs.examples import telemetry as example
from tests.conftest import ROOT, run_burst

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = ROOT / "docs" / "howto" / "telemetry.md"


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_the_sdk_set_up_exports_a_jobs_spans_and_metrics_when_the_worker_stops(
    telemetry_factory, queue
):
    telemetry_factory()  # only to set the installed observer aside meanwhile
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider, meter_provider = example.sdk_providers("shop-worker", spans, reader)
    observer = observers.add(
        OtelObserver(tracer_provider=tracer_provider, meter_provider=meter_provider)
    )
    try:
        ref = jobs.plain.using(queue=queue).enqueue(1)
        run_burst(queue)
        # The batch processor had no reason to export yet: the worker's
        # flush on its way out did.
        finished = {span.name: span for span in spans.get_finished_spans()}
    finally:
        observers.remove(observer)
        tracer_provider.shutdown()
    process = finished["process testapp.plain"]
    assert process.attributes["messaging.message.id"] == str(ref.id)
    assert process.resource.attributes["service.name"] == "shop-worker"
    names = {
        metric.name
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert {"awa.job.outcomes", "awa.job.duration", "awa.dispatch.claims"} <= names


def test_the_page_lists_the_metrics_from_the_table_and_is_in_the_toctree():
    text = PAGE.read_text()
    assert "```{awa-otel-metrics}" in text
    index = (ROOT / "docs" / "index.md").read_text()
    assert "howto/telemetry\n" in index
    # The snippets it includes exist in the example module.
    source = Path(example.__file__).read_text()
    for marker in ("providers", "configure"):
        assert f"# [{marker}]" in source and f':start-after: "# [{marker}]"' in text
