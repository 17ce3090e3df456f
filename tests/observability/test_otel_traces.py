"""OpenTelemetry spans of a job's life, recorded by a real in-process worker.

``send {queue}`` around the enqueue, ``process {kind}`` per attempt: the
first attempt continues the producer's trace through the ``traceparent``
stored in the job's metadata, a retry starts a trace of its own linked to
the enqueue, and the handler runs with the process span as its context.
"""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from testapp import jobs

import awa_django
from awa_django import job, ops
from awa_django.domain.payload import TRACEPARENT_KEY
from awa_django.domain.records import ClaimedJob, Closure
from tests.conftest import run_burst
from tests.observability.otel_support import build

pytestmark = pytest.mark.django_db(transaction=True)

# What handlers below saw as their ambient span, and the spans they made.
SEEN: list[trace.SpanContext] = []
TRACERS: list[trace.Tracer] = []


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    SEEN.clear()
    yield
    TRACERS.clear()


def _own_span(label: str) -> None:
    SEEN.append(trace.get_current_span().get_span_context())
    with TRACERS[0].start_as_current_span(f"handler {label}"):
        pass


@job(kind="tests.otel.spans_sync")
def spans_sync() -> None:
    _own_span("sync")


@job(kind="tests.otel.spans_async")
async def spans_async() -> None:
    _own_span("async")


def by_name(telemetry, name: str):
    return [s for s in telemetry.spans() if s.name == name]


def test_first_attempt_continues_the_producers_trace(telemetry, queue):
    with telemetry.tracer.start_as_current_span("request"):
        ref = jobs.plain.using(queue=queue).enqueue(1, b=2)

    run_burst(queue)

    (request,) = by_name(telemetry, "request")
    (send,) = by_name(telemetry, f"send {queue}")
    (process,) = by_name(telemetry, "process testapp.plain")
    assert send.kind is SpanKind.PRODUCER and send.parent.span_id == request.context.span_id
    assert dict(send.attributes) == {
        "messaging.system": "awa",
        "messaging.destination.name": queue,
        "messaging.operation.type": "send",
    }
    # The job carries the send span's context, and its execution is its child.
    stored = ops.get_job(ref.id).metadata[TRACEPARENT_KEY]
    context = send.context
    flags = int(context.trace_flags)
    assert flags & 1  # sampled
    assert stored == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    assert process.context.trace_id == send.context.trace_id
    assert process.parent.span_id == send.context.span_id and process.parent.is_remote
    assert process.kind is SpanKind.CONSUMER and not process.links
    assert dict(process.attributes) == {
        "messaging.system": "awa",
        "messaging.destination.name": queue,
        "messaging.operation.type": "process",
        "messaging.message.id": str(ref.id),
        "awa.job.kind": "testapp.plain",
        "awa.job.attempt": 1,
        "awa.job.outcome": "completed",
    }
    assert process.status.status_code is StatusCode.UNSET


def test_a_retry_starts_a_new_trace_linked_to_the_enqueue(telemetry, queue):
    with telemetry.tracer.start_as_current_span("request"):
        jobs.fail_then_succeed.using(queue=queue).enqueue(1)

    run_burst(queue)

    (send,) = by_name(telemetry, f"send {queue}")
    first, second = sorted(
        by_name(telemetry, "process testapp.fail_then_succeed"),
        key=lambda s: s.attributes["awa.job.attempt"],
    )
    assert first.context.trace_id == send.context.trace_id
    assert first.parent.span_id == send.context.span_id
    assert first.attributes["awa.job.outcome"] == "retryable"
    assert first.status.status_code is StatusCode.ERROR
    [event] = first.events
    assert event.name == "exception"
    assert event.attributes["exception.message"] == "failing attempt 1"
    # The retry: a root span of a trace of its own, linked to the send span.
    assert second.attributes["awa.job.attempt"] == 2
    assert second.parent is None and second.context.trace_id != send.context.trace_id
    [link] = second.links
    assert (link.context.trace_id, link.context.span_id) == (
        send.context.trace_id,
        send.context.span_id,
    )
    assert second.attributes["awa.job.outcome"] == "completed"
    assert second.status.status_code is StatusCode.UNSET


def test_handler_spans_nest_under_the_process_span(telemetry, queue):
    TRACERS.append(telemetry.tracer)
    spans_sync.using(queue=queue).enqueue()
    spans_async.using(queue=queue).enqueue()

    run_burst(queue)

    for label in ("sync", "async"):
        (process,) = by_name(telemetry, f"process tests.otel.spans_{label}")
        (own,) = by_name(telemetry, f"handler {label}")
        assert own.parent.span_id == process.context.span_id
        assert own.context.trace_id == process.context.trace_id
        assert process.context in SEEN
        # Enqueued outside any span: the trace starts at the send span.
        (send,) = [
            s
            for s in by_name(telemetry, f"send {queue}")
            if s.context.span_id == process.parent.span_id
        ]
        assert send.parent is None


def test_failures_set_the_error_status_and_record_the_exception(telemetry, queue):
    jobs.boom.using(queue=queue).enqueue()  # retryable
    jobs.terminal.using(queue=queue).enqueue()  # failed
    jobs.cancel.using(queue=queue).enqueue()  # cancelled: deliberate, not an error

    run_burst(queue)

    (boom,) = by_name(telemetry, "process testapp.boom")
    (terminal,) = by_name(telemetry, "process testapp.terminal")
    (cancel,) = by_name(telemetry, "process testapp.cancel")
    assert (boom.attributes["awa.job.outcome"], boom.status.status_code) == (
        "retryable",
        StatusCode.ERROR,
    )
    assert boom.status.description == "ValueError: boom"
    assert boom.events[0].attributes["exception.type"] == "ValueError"
    assert (terminal.attributes["awa.job.outcome"], terminal.status.status_code) == (
        "failed",
        StatusCode.ERROR,
    )
    assert "card declined" in terminal.status.description
    assert (cancel.attributes["awa.job.outcome"], cancel.status.status_code) == (
        "cancelled",
        StatusCode.UNSET,
    )
    assert not cancel.events


def test_with_capture_off_no_traceparent_is_written(telemetry_factory, queue):
    telemetry = telemetry_factory(trace_capture=False)
    with telemetry.tracer.start_as_current_span("request"):
        ref = jobs.plain.using(queue=queue).enqueue(1)

    run_burst(queue)

    assert TRACEPARENT_KEY not in ops.get_job(ref.id).metadata
    (send,) = by_name(telemetry, f"send {queue}")
    (process,) = by_name(telemetry, "process testapp.plain")
    assert process.parent is None and process.context.trace_id != send.context.trace_id


@pytest.mark.parametrize("capture", [True, False])
def test_an_explicit_traceparent_wins_and_is_honoured(telemetry_factory, queue, capture):
    telemetry = telemetry_factory(trace_capture=capture)
    explicit = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with telemetry.tracer.start_as_current_span("request"):
        ref = jobs.plain.using(queue=queue, metadata={TRACEPARENT_KEY: explicit}).enqueue(1)
        many = awa_django.enqueue_many(
            [jobs.plain.using(queue=queue, metadata={TRACEPARENT_KEY: explicit}).prepare(2)]
        )

    run_burst(queue)

    assert ops.get_job(ref.id).metadata[TRACEPARENT_KEY] == explicit
    assert ops.get_job(many[0]).metadata[TRACEPARENT_KEY] == explicit
    processes = by_name(telemetry, "process testapp.plain")
    assert len(processes) == 2
    for process in processes:
        assert f"{process.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
        assert f"{process.parent.span_id:016x}" == "b7ad6b7169203331"


def test_enqueue_many_is_one_send_span_and_jobs_carry_where_they_were_prepared(telemetry, queue):
    with telemetry.tracer.start_as_current_span("request"):
        ids = awa_django.enqueue_many([jobs.plain.using(queue=queue).prepare(n) for n in range(3)])

    run_burst(queue)

    (request,) = by_name(telemetry, "request")
    (send,) = by_name(telemetry, f"send {queue}")
    assert send.attributes["messaging.batch.message_count"] == 3
    assert send.parent.span_id == request.context.span_id
    processes = by_name(telemetry, "process testapp.plain")
    assert sorted(p.attributes["messaging.message.id"] for p in processes) == sorted(
        str(i) for i in ids
    )
    # prepare() ran before the batch's send span: each job continues the request.
    assert {p.parent.span_id for p in processes} == {request.context.span_id}
    assert {p.context.trace_id for p in processes} == {request.context.trace_id}


def test_an_attempt_that_parks_ends_its_span_when_it_parks(telemetry, queue):
    ref = jobs.park.using(queue=queue).enqueue()

    worker = run_burst(queue)  # a parked attempt does not keep a burst running

    assert ops.get_job(ref.id).state == "waiting_external"
    (process,) = by_name(telemetry, "process testapp.park")
    assert process.attributes["awa.job.outcome"] == "waiting_external"
    assert process.status.status_code is StatusCode.UNSET and not process.events
    assert worker.completed == 0
    assert telemetry.value("awa.runtime.inflight") == 0


def test_aenqueue_continues_the_async_callers_trace(telemetry, queue):
    async def produce():
        with telemetry.tracer.start_as_current_span("async request"):
            return await jobs.plain.using(queue=queue).aenqueue(1)

    ref = asyncio.run(produce())
    run_burst(queue)

    (request,) = by_name(telemetry, "async request")
    (send,) = by_name(telemetry, f"send {queue}")
    (process,) = by_name(telemetry, "process testapp.plain")
    assert send.parent.span_id == request.context.span_id
    assert process.parent.span_id == send.context.span_id
    assert process.attributes["messaging.message.id"] == str(ref.id)


def _claimed(job_id: int) -> ClaimedJob:
    return ClaimedJob(
        job_id=job_id, run_lease=1, kind="tests.otel.lazy", queue="q-lazy", priority=2,
        effective_priority=2, attempt=1, max_attempts=25, args=[], kwargs={}, metadata={},
        tags=[], errors=[], progress=None, claim_slot=0, batch_id=1, item=0,
        deadline_at=None, claim_nonce=0,
    )  # fmt: skip


async def _until(predicate, turns: int = 200) -> bool:
    """Let the event loop run (one turn per ``await``) until ``predicate()``
    holds; False if it still does not after ``turns`` turns."""
    for _ in range(turns):
        if predicate():
            return True
        await asyncio.sleep(0)
    return predicate()


def test_the_hot_path_leaves_the_span_until_the_loop_is_idle(telemetry):
    """An attempt whose handler never looks at its span costs the loop a
    start time and one queued item per close; the span is built when the
    loop has nothing else to run, with the times taken on the hot path and
    the outcome among its first attributes."""
    observer = telemetry.observer
    job = _claimed(1)

    async def attempt():
        with observer.attempt_scope(job) as lazy:
            assert trace.get_current_span() is lazy and not lazy.built
        observer.closed(job, Closure(1, 1, 0, 1, 0, "completed", "completed"), True, 0.002)
        assert not lazy.built and telemetry.spans() == []  # nothing on the hot path
        assert await _until(lambda: telemetry.spans() != [])
        return lazy

    lazy = asyncio.run(attempt())
    (span,) = telemetry.spans("process tests.otel.lazy")
    assert not lazy.built  # recorded finished, no SDK span was started
    assert span.start_time == lazy.start_ns and span.end_time >= span.start_time
    assert span.attributes["awa.job.outcome"] == "completed"
    assert span.attributes["messaging.message.id"] == "1"
    durations = telemetry.value(
        "awa.job.duration", queue="q-lazy", kind="tests.otel.lazy", outcome="completed"
    )
    assert durations == 1


def test_a_handler_that_looks_at_its_span_builds_it_at_once(telemetry):
    observer = telemetry.observer
    job = _claimed(2)
    with observer.attempt_scope(job) as lazy:
        context = trace.get_current_span().get_span_context()
        assert lazy.built and context.is_valid
    observer.closed(job, Closure(2, 1, 0, 1, 0, "completed", "completed"), True, 0.001)
    observer.flush(5.0)
    (span,) = telemetry.spans("process tests.otel.lazy")
    assert span.context.span_id == context.span_id
    assert span.attributes["awa.job.outcome"] == "completed"


def _process_span_of(telemetry, job_id: int, closure: Closure):
    observer = telemetry.observer
    job = _claimed(job_id)
    with observer.attempt_scope(job) as lazy:
        pass
    observer.closed(job, closure, True, 0.001)
    observer.flush(5.0)
    (span,) = [s for s in telemetry.spans() if s.attributes["messaging.message.id"] == str(job_id)]
    return lazy, span


def test_an_untouched_span_is_handed_to_the_processors_finished(telemetry):
    """The fast path (``observability.finished``) records what the SDK's own
    span would: name, kind, scope, resource, times and attributes."""
    observer = telemetry.observer
    lazy, fast = _process_span_of(telemetry, 3, Closure(3, 1, 0, 1, 0, "completed", "completed"))
    assert not lazy.built  # no SDK span was ever started for it
    assert observer._finished_spans() is not None
    reference = observer._start_process(_claimed(4), lazy.start_ns, "completed")
    reference.end(fast.end_time)
    observer.flush(5.0)
    (slow,) = [s for s in telemetry.spans() if s.attributes["messaging.message.id"] == "4"]
    assert (fast.name, fast.kind, fast.parent, fast.status.status_code) == (
        slow.name,
        slow.kind,
        slow.parent,
        slow.status.status_code,
    )
    assert fast.instrumentation_scope == slow.instrumentation_scope
    assert fast.resource == slow.resource
    assert {k: v for k, v in fast.attributes.items() if k != "messaging.message.id"} == {
        k: v for k, v in slow.attributes.items() if k != "messaging.message.id"
    }
    assert fast.context.trace_flags.sampled and fast.context.span_id != slow.context.span_id
    assert (fast.start_time, fast.end_time) == (lazy.start_ns, slow.end_time)


def test_a_failure_and_a_custom_processor_take_the_sdks_own_span(telemetry):
    from opentelemetry.sdk.trace import SpanProcessor

    failed = Closure(5, 1, 0, 1, 0, "failed", "failed", reason="boom")
    lazy, span = _process_span_of(telemetry, 5, failed)
    assert lazy.built and span.status.status_code.name == "ERROR"

    started: list[str] = []

    class Starts(SpanProcessor):
        def on_start(self, span, parent_context=None):
            started.append(span.name)

    telemetry.tracer_provider.add_span_processor(Starts())
    assert telemetry.observer._finished_spans() is None  # rechecked: a processor was added
    lazy, span = _process_span_of(telemetry, 6, Closure(6, 1, 0, 1, 0, "completed", "completed"))
    assert lazy.built and started == ["process tests.otel.lazy"]


@pytest.mark.parametrize("sampled", [False, True])
def test_the_fast_path_honours_the_sampler(sampled):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON

    from awa_django.observability import finished

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON if sampled else ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    fast = finished.for_tracer(provider.get_tracer("awa_django"))
    assert fast is not None
    fast.record("process k", {"awa.job.kind": "k"}, None, None, 1, 2)
    assert len(exporter.get_finished_spans()) == (1 if sampled else 0)
    provider.shutdown()


def test_the_default_sampler_is_answered_without_asking_it_only_for_roots():
    """The SDK's default sampler samples every root: the fast path knows that
    without building a SamplingResult; a parent's decision, and any other
    sampler, are still asked."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.sdk.trace.sampling import DEFAULT_ON, ParentBased, TraceIdRatioBased
    from opentelemetry.trace import SpanContext, TraceFlags

    from awa_django.observability import finished

    def recorded(sampler, parent):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(sampler=sampler)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        fast = finished.for_tracer(provider.get_tracer("awa_django"))
        assert fast is not None
        fast.record("process k", {"awa.job.kind": "k"}, parent, None, 1, 2)
        provider.shutdown()
        return exporter.get_finished_spans()

    (root,) = recorded(DEFAULT_ON, None)
    assert root.context.trace_flags.sampled and root.parent is None
    assert root.context.trace_state == trace.TraceState()
    assert dict(root.attributes) == {"awa.job.kind": "k"}

    def remote(flags: int) -> SpanContext:
        return SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(flags))

    (child,) = recorded(DEFAULT_ON, remote(TraceFlags.SAMPLED))
    assert (child.context.trace_id, child.parent.span_id) == (0xABC, 0xDEF)
    assert recorded(DEFAULT_ON, remote(TraceFlags.DEFAULT)) == ()  # the parent said no
    assert recorded(ParentBased(TraceIdRatioBased(0.0)), None) == ()  # asked: never


def test_queued_closes_are_recorded_without_losing_or_mixing_any():
    """Closes queued on a busy loop -- 150 of three outcomes, single and
    grouped, a parked attempt and a stale close among them -- are recorded
    exactly once the loop gets to them, split over as many passes as the
    time budget asks for."""
    telemetry = build()
    observer = telemetry.observer
    observer._deferred.BUDGET = 0.0  # one item per pass: many passes
    outcomes = ("completed", "retryable", "cancelled")
    targets = {"completed": "completed", "retryable": "retryable", "cancelled": "cancelled"}

    async def attempts():
        group = []
        for n in range(150):
            job = _claimed(1000 + n)
            with observer.attempt_scope(job):
                pass
            if n == 70:
                observer.parked(job)
                continue
            outcome = outcomes[n % 3]
            closure = Closure(job.job_id, 1, 0, 1, 0, targets[outcome], outcome)
            if n < 100:
                observer.closed(job, closure, n != 71, 0.001)
            else:
                group.append((job, closure, True))
        observer.closed_many(group, 0.001)
        assert telemetry.spans() == []  # nothing yet: the loop has not been idle
        assert await _until(lambda: len(observer._deferred) == 0, turns=2000)

    asyncio.run(attempts())

    labels = {"queue": "q-lazy", "kind": "tests.otel.lazy"}
    expected = {o: sum(1 for n in range(150) if n % 3 == i and n not in (70, 71))
                for i, o in enumerate(outcomes)}  # fmt: skip
    for outcome, count in expected.items():
        assert telemetry.value("awa.job.outcomes", **labels, outcome=outcome) == count
        assert telemetry.value("awa.job.duration", **labels, outcome=outcome) == count
    assert telemetry.value("awa.job.stale_completions", **labels) == 1
    spans = telemetry.spans("process tests.otel.lazy")
    assert sorted(int(s.attributes["messaging.message.id"]) for s in spans) == list(
        range(1000, 1150)
    )
    by_id = {int(s.attributes["messaging.message.id"]): s for s in spans}
    assert by_id[1070].attributes["awa.job.outcome"] == "waiting_external"
    assert by_id[1071].attributes["awa.job.stale"] is True
    assert by_id[1001].status.status_code == StatusCode.ERROR  # a retryable attempt
