"""Grouped histogram recording (``observability.bulk``) exports exactly what
recording each value does, and falls back to recording each value wherever
adding to the aggregation directly could differ."""

from __future__ import annotations

import importlib.metadata
import random
from typing import Any

import pytest
from opentelemetry.sdk.metrics import AlwaysOnExemplarFilter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import View

from awa_django.observability.bulk import BulkHistogram
from awa_django.observability.otel_names import SECONDS_BUCKETS

# The SDK release whose private layout this was checked against: there the
# grouped path must be taken (another release may fall back, which is slower
# but still exact; the equality checks below hold either way).
VERIFIED = importlib.metadata.version("opentelemetry-sdk").startswith("1.45.")

ATTRIBUTES = {"queue": "q", "kind": "k", "outcome": "completed"}
OTHER = {"queue": "q", "kind": "k", "outcome": "retryable"}


def _values(seed: int, n: int) -> list[float]:
    rng = random.Random(seed)
    values = [rng.expovariate(200.0) for _ in range(n)]
    values += [0.0, SECONDS_BUCKETS[0], SECONDS_BUCKETS[3], 1e-9, 700.0]  # edges, overflow bucket
    rng.shuffle(values)
    return values


def _histogram(**provider: Any) -> tuple[Any, InMemoryMetricReader]:
    reader = InMemoryMetricReader(**provider.pop("reader", {}))
    meter = MeterProvider(metric_readers=[reader], **provider).get_meter("tests")
    histogram = meter.create_histogram(
        "awa.job.duration", unit="s", explicit_bucket_boundaries_advisory=SECONDS_BUCKETS
    )
    return histogram, reader


def _points(reader: InMemoryMetricReader) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        tuple(sorted(point.attributes.items())): (
            point.count,
            point.sum,
            point.min,
            point.max,
            tuple(point.bucket_counts),
            tuple(point.explicit_bounds),
        )
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }


def _record_both(
    groups: list[tuple[dict[str, str], list[float]]], **provider: Any
) -> tuple[BulkHistogram, InMemoryMetricReader, InMemoryMetricReader]:
    grouped, grouped_reader = _histogram(**dict(provider))
    each, each_reader = _histogram(**dict(provider))
    bulk = BulkHistogram(grouped)
    for attributes, values in groups:
        bulk.record_many(tuple(attributes.values()), attributes, values)
        for value in values:
            each.record(value, attributes)
    return bulk, grouped_reader, each_reader


def test_grouped_values_export_exactly_what_recording_each_does():
    groups = [
        (ATTRIBUTES, _values(1, 300)),
        (OTHER, [0.25]),  # a group of one: the public call alone
        (ATTRIBUTES, _values(2, 50)),  # the aggregation found again (cached)
        (OTHER, _values(3, 64)),
    ]
    bulk, grouped, each = _record_both(groups)
    assert _points(grouped) == _points(each)
    count, _, low, high, buckets, _ = _points(grouped)[tuple(sorted(ATTRIBUTES.items()))]
    assert count == 360 and sum(buckets) == 360 and low == 0.0 and high == 700.0
    if VERIFIED:
        assert set(bulk._located) == {tuple(ATTRIBUTES.values()), tuple(OTHER.values())}


def test_a_known_attribute_set_skips_the_sdk_call_and_an_unknown_one_makes_it(monkeypatch):
    histogram, reader = _histogram()
    bulk = BulkHistogram(histogram)
    calls: list[float] = []
    record = histogram.record
    monkeypatch.setattr(histogram, "record", lambda v, a: (calls.append(v), record(v, a)))
    bulk.record_many(("q", "k", "completed"), ATTRIBUTES, [0.5])
    bulk.record_many(("q", "k", "completed"), ATTRIBUTES, [0.1, 0.2, 0.3])
    assert len(calls) == (1 if VERIFIED else 4)
    (point,) = _points(reader).values()
    assert point[:4] == (4, pytest.approx(1.1), 0.1, 0.5)


def test_collections_between_groups_keep_accumulating():
    """Cumulative streams: collecting between two groups (an exporter's
    interval) loses nothing and counts nothing twice."""
    grouped, grouped_reader = _histogram()
    each, each_reader = _histogram()
    bulk = BulkHistogram(grouped)
    for seed in range(4):
        values = _values(seed, 40)
        bulk.record_many(("q", "k", "completed"), ATTRIBUTES, values)
        for value in values:
            each.record(value, ATTRIBUTES)
        assert _points(grouped_reader) == _points(each_reader)


@pytest.mark.parametrize(
    "provider",
    [
        pytest.param(
            {"views": [View(instrument_name="awa.job.duration", attribute_keys={"queue"})]},
            id="view-keeps-some-attributes",
        ),
        pytest.param(
            {"reader": {"preferred_temporality": {Histogram: AggregationTemporality.DELTA}}},
            id="delta-reader",
        ),
        pytest.param({"exemplar_filter": AlwaysOnExemplarFilter()}, id="exemplars-always-on"),
    ],
)
def test_setups_where_direct_adds_could_differ_record_each_value(provider):
    groups = [(ATTRIBUTES, _values(4, 100)), (OTHER, _values(5, 20))]
    bulk, grouped, each = _record_both(groups, **provider)
    assert bulk._located == {}
    grouped_points, each_points = _points(grouped), _points(each)
    # Exemplars and delta start times aside, the numbers are the same.
    assert grouped_points == each_points


def test_values_the_sdk_would_reject_go_through_its_checks():
    grouped, reader = _histogram()
    bulk = BulkHistogram(grouped)
    bulk.record_many(("q", "k", "completed"), ATTRIBUTES, [0.1, -1.0, float("nan"), 0.2])
    (point,) = _points(reader).values()
    assert point[0] == 2 and point[1] == pytest.approx(0.3)


def test_a_full_stream_sends_the_group_to_overflow_as_the_sdk_does():
    grouped, grouped_reader = _histogram()
    each, each_reader = _histogram()
    for histogram in (grouped, each):  # fill the default cardinality limit
        limit = 2000
        for n in range(limit):
            histogram.record(0.001, {"queue": f"q{n}", "kind": "k", "outcome": "completed"})
    bulk = BulkHistogram(grouped)
    values = _values(6, 30)
    bulk.record_many(("late",), {"queue": "late", "kind": "k", "outcome": "completed"}, values)
    for value in values:
        each.record(value, {"queue": "late", "kind": "k", "outcome": "completed"})
    assert _points(grouped_reader) == _points(each_reader)
