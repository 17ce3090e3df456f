"""The shortcuts of ``observability.finished`` give what the SDK's own path
gives: the span built from positional arguments, the sampling verdict of
the SDK's samplers, the batch hand-over to a ``BatchSpanProcessor``; and
anything they were not checked against takes the SDK's path."""

from __future__ import annotations

import importlib.metadata
import random
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    DEFAULT_OFF,
    DEFAULT_ON,
    Decision,
    ParentBased,
    ParentBasedTraceIdRatio,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanContext, TraceFlags, TraceState

from awa_django.observability import finished

# The SDK release whose private layout the shortcuts were checked against:
# there they must be taken (another release may fall back: slower, same spans).
VERIFIED = importlib.metadata.version("opentelemetry-sdk").startswith("1.45.")
ROOT = trace.set_span_in_context(trace.INVALID_SPAN)


def _fast(sampler: Sampler = DEFAULT_ON, processor: Any = None):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(processor or SimpleSpanProcessor(exporter))
    fast = finished.for_tracer(provider.get_tracer("awa_django"))
    assert fast is not None
    return fast, exporter, provider


def _parent(sampled: bool, remote: bool = True) -> SpanContext:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return SpanContext(
        0x1234, 0x5678, is_remote=remote, trace_flags=flags, trace_state=TraceState([("k", "v")])
    )


@pytest.mark.skipif(not VERIFIED, reason="checked against opentelemetry-sdk 1.45")
def test_on_the_verified_sdk_every_shortcut_is_taken():
    fast, _, provider = _fast()
    assert fast._span is finished.FinishedSpan
    assert fast._direct_context
    assert fast._verdict is not None
    batched, _, batched_provider = _fast(processor=BatchSpanProcessor(InMemorySpanExporter()))
    assert batched._emit_many.__name__ == "queue_many"
    provider.shutdown()
    batched_provider.shutdown()


def test_a_finished_span_holds_what_the_sdks_constructor_stores():
    resource = TracerProvider().resource
    parent = _parent(True)
    context = SpanContext(1, 2, False, TraceFlags(1))
    links = (Link(parent, {"a": 1}),)
    ours = finished.FinishedSpan("n", context, parent, {"x": 1}, links, 5, 6, resource, None)
    theirs = ReadableSpan(
        name="n",
        context=context,
        parent=parent,
        resource=resource,
        attributes={"x": 1},
        links=links,
        kind=trace.SpanKind.CONSUMER,
        start_time=5,
        end_time=6,
    )
    assert isinstance(ours, ReadableSpan)
    assert ours.to_json() == theirs.to_json()
    for field in ("name", "context", "parent", "kind", "start_time", "end_time", "links"):
        assert getattr(ours, field) == getattr(theirs, field)
    assert ours.status.status_code == theirs.status.status_code
    assert finished._fields_match(resource, None) is True


def test_the_direct_span_context_is_the_one_the_constructor_makes():
    made = SpanContext(7, 9, False, TraceFlags(1), TraceState())
    direct = tuple.__new__(SpanContext, (7, 9, False, TraceFlags(1), TraceState(), True))
    assert finished._context_layout_known()
    assert made == direct and direct.is_valid and not direct.is_remote


SAMPLERS = [
    ALWAYS_ON,
    ALWAYS_OFF,
    DEFAULT_ON,
    DEFAULT_OFF,
    TraceIdRatioBased(0.25),
    ParentBasedTraceIdRatio(0.5),
    ParentBased(TraceIdRatioBased(0.1), remote_parent_not_sampled=ALWAYS_ON),
    ParentBased(ALWAYS_ON, local_parent_sampled=ALWAYS_OFF),
]


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: s.get_description())
def test_the_verdict_agrees_with_the_samplers_own_answer(sampler):
    """For 2,000 random trace ids and each kind of parent (none, remote or
    local, sampled or not), the verdict is what ``should_sample`` decides."""
    verdict = finished._verdict(sampler)
    assert verdict is not None
    rng = random.Random(7)
    parents = [None, _parent(True), _parent(False), _parent(True, False), _parent(False, False)]
    for _ in range(2_000):
        trace_id = rng.getrandbits(128) or 1
        for parent in parents:
            context = (
                ROOT
                if parent is None
                else trace.set_span_in_context(trace.NonRecordingSpan(parent))
            )
            tid = trace_id if parent is None else parent.trace_id
            asked = sampler.should_sample(context, tid, "n", trace.SpanKind.CONSUMER, {}, None)
            assert verdict(tid, parent) == asked.decision.is_sampled(), (trace_id, parent)


class Picky(Sampler):
    """Samples by an attribute: it must see them."""

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None,
                      links=None, trace_state=None) -> SamplingResult:  # fmt: skip
        keep = bool(attributes and attributes.get("awa.job.kind") == "keep")
        return SamplingResult(
            Decision.RECORD_AND_SAMPLE if keep else Decision.DROP, {"picked": True}
        )

    def get_description(self) -> str:
        return "Picky"


class Ratio(TraceIdRatioBased):
    """A subclass: it may decide otherwise, so it is asked."""


def test_a_sampler_that_may_look_at_attributes_is_asked_with_them():
    assert finished._verdict(Picky()) is None
    assert finished._verdict(Ratio(1.0)) is None
    assert finished._verdict(ParentBased(Picky())) is None
    fast, exporter, provider = _fast(Picky())
    assert fast.decide("process k", None, None) is finished.UNDECIDED
    fast.record("process k", {"awa.job.kind": "keep"}, None, None, 1, 2)
    fast.record("process k", {"awa.job.kind": "drop"}, None, None, 1, 2)
    (span,) = exporter.get_finished_spans()
    assert dict(span.attributes) == {"awa.job.kind": "keep", "picked": True}
    provider.shutdown()


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_a_span_the_sampler_drops_is_never_built(rate):
    fast, exporter, provider = _fast(ParentBasedTraceIdRatio(rate))
    decided = fast.decide("process k", None, None)
    if rate == 0.0:
        assert decided is None
    else:
        trace_id, flags, trace_state, added = decided
        assert flags.sampled and trace_state == TraceState() and added is None
        fast.record("process k", {"awa.job.kind": "k"}, None, None, 1, 2, None, decided)
        (span,) = exporter.get_finished_spans()
        assert span.context.trace_id == trace_id
    # A sampled remote parent wins over the ratio; its trace state carries on.
    parent = _parent(True)
    decided = fast.decide("process k", parent, None)
    fast.record("process k", {"awa.job.kind": "k"}, parent, None, 1, 2, None, decided)
    child = exporter.get_finished_spans()[-1]
    assert child.parent == parent and child.context.trace_id == parent.trace_id
    assert child.context.trace_state == parent.trace_state
    provider.shutdown()


class Collect(SpanExporter):
    def __init__(self) -> None:
        self.names: list[str] = []

    def export(self, spans) -> SpanExportResult:
        self.names.extend(s.name for s in spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _spans(fast: finished.FinishedSpans, count: int, prefix: str = "s") -> list[Any]:
    into: list[Any] = []
    for n in range(count):
        fast.record(f"{prefix}{n}", {}, None, None, n, n + 1, into)
    return into


@pytest.mark.parametrize("count", [3, 600])
def test_a_batch_goes_into_the_batch_queue_as_emit_would_leave_it(count):
    """Handed over at once, the spans are exported in the order they were
    recorded, and a full batch wakes the export thread (600 > 512)."""
    exporter = Collect()
    fast, _, provider = _fast(processor=BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    spans = _spans(fast, count)
    assert spans and exporter.names == []  # collected, not handed over yet
    fast.hand_over(spans)
    provider.force_flush()
    assert exporter.names == [f"s{n}" for n in range(count)]
    provider.shutdown()


def test_a_batch_that_would_overflow_the_queue_goes_span_by_span(monkeypatch):
    """The SDK drops (with a warning) what does not fit its queue: a batch
    that would not fit is left to ``emit``, span by span, so the same spans
    are kept and dropped as without the batch path."""
    processor = BatchSpanProcessor(
        Collect(), max_queue_size=20, max_export_batch_size=20, schedule_delay_millis=60_000
    )
    fast, _, provider = _fast(processor=processor)
    batcher = processor._batch_processor
    emitted: list[str] = []
    emit = batcher.emit
    monkeypatch.setattr(batcher, "emit", lambda span: (emitted.append(span.name), emit(span)))
    fast.hand_over(_spans(fast, 8, "a"))
    assert emitted == [] and len(batcher._queue) == 8  # fits: one extendleft
    fast.hand_over(_spans(fast, 15, "b"))  # 8 + 15 > 20
    assert emitted == [f"b{n}" for n in range(15)]
    provider.shutdown()


def test_after_shutdown_a_batch_is_refused_as_emit_refuses_it():
    exporter = Collect()
    fast, _, provider = _fast(processor=BatchSpanProcessor(exporter))
    spans = _spans(fast, 3)
    provider.shutdown()
    fast.hand_over(spans)
    assert exporter.names == []


def test_other_processors_get_each_span_through_on_end():
    fast, exporter, provider = _fast()  # a SimpleSpanProcessor
    assert fast._emit_many.__name__ == "one_by_one"
    fast.hand_over(_spans(fast, 4))
    assert [s.name for s in exporter.get_finished_spans()] == ["s0", "s1", "s2", "s3"]
    provider.shutdown()


def test_where_a_layout_differs_the_sdks_constructors_build_the_same_span(monkeypatch):
    """Another SDK release may store spans differently: the checks then
    fail and the constructors are used, giving the same exported span."""
    spans = []
    for shortcuts in (True, False):
        if not shortcuts:
            monkeypatch.setattr(finished, "_fields_match", lambda resource, scope: False)
            monkeypatch.setattr(finished, "_context_layout_known", lambda: False)
        fast, exporter, provider = _fast()
        assert (fast._span is finished.FinishedSpan) is shortcuts
        parent = _parent(True)
        fast.record("process k", {"awa.job.kind": "k"}, parent, None, 10, 20)
        (span,) = exporter.get_finished_spans()
        spans.append(span)
        provider.shutdown()
    ours, theirs = spans
    assert type(theirs) is ReadableSpan
    for field in ("name", "parent", "kind", "start_time", "end_time", "attributes", "resource"):
        assert getattr(ours, field) == getattr(theirs, field)
    assert ours.context.trace_id == theirs.context.trace_id == 0x1234
    assert ours.context.trace_state == theirs.context.trace_state
