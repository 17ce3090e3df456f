"""OpenTelemetry metrics and spans (the ``otel`` extra: ``awa-django[otel]``).

Only ``opentelemetry-api`` is imported here.  The observer takes its
tracer and meter from the global providers the application configures
with the SDK (or from providers it is given), so a process that never sets
one records into the API's no-op implementations, and a process without the
extra never imports this module (:mod:`.install` looks the package up
without importing it).

Metrics
    One instrument per entry of :data:`.metrics.ALL` (see
    :mod:`.otel_names` for how they are built and fed; the observable
    gauges read the process state kept in :mod:`.otel_gauges`).

Spans
    ``send {queue}`` (PRODUCER) around an enqueue, and ``process {kind}``
    (CONSUMER) for each attempt, with the messaging semantic conventions.
    The W3C ``traceparent`` of the ambient context -- inside the enqueue,
    the send span -- goes into the job's metadata (``awa:traceparent``;
    ``trace_capture=False`` stops that, an explicit value always wins), and
    the attempt's span is built from it: the first attempt is a child of
    the producer's span, so enqueue and execution read as one trace; a
    later attempt starts a new root trace with a span link to the enqueue,
    so a retry hours later neither stretches the producer's trace over the
    backoff schedule nor inherits its sampling decision.

    The process span is the ambient context while the handler runs (it is
    attached on the handler's thread for a sync handler), so the handler's
    own spans nest under it.  It stays open after the handler returns until
    the outcome is durable (``closed``), so its duration is the one
    ``awa.job.duration`` records and it carries the outcome
    (``awa.job.outcome``).  A retryable, failed or dead-lettered attempt
    sets the status to ERROR and records the exception the handler raised.
    An attempt that parks for a callback ends its span when it parks; one
    whose handler was interrupted (shutdown cancelled it: a rescue or the
    next worker closes it) ends it at once, marked ``interrupted``.

Cost
    The hot path does as little as it can: the attempt scope makes a
    :class:`~.otel_spans.LazySpan` current (a start time, no SDK span yet), and closing
    an attempt appends one item to a queue (:mod:`.idle`) that the event
    loop works off when nothing else is ready to run -- while the worker
    waits on PostgreSQL: the span, handed to the span processors already
    finished with the recorded start and end times and the outcome among
    its attributes (:mod:`.finished`), the duration histogram (grouped per
    attribute set, :mod:`.bulk`), the outcome counts.  The lazy span and
    the attempt scope are :mod:`.otel_spans`; names and attribute sets
    :mod:`.otel_names`.  A handler that looks
    at its span (a child span, ``get_current_span()``, an enqueue capturing
    the traceparent) builds the SDK span at once.  ``awa_bench --telemetry
    both`` measures what is left.
"""

from __future__ import annotations

import importlib.metadata
import logging
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TracerProvider,
)

from ..domain.closures import is_sealed_job, shown
from ..domain.payload import TRACEPARENT_KEY
from ..domain.records import DLQ, FAILED, RETRYABLE, ClaimedJob, Closure, PreparedJob
from . import bulk, idle
from . import metrics as table
from .hooks import Observer, QueueSample
from .otel_gauges import ProcessGauges
from .otel_names import (
    CACHE_LIMIT,
    JOB_ATTEMPT,
    JOB_KIND,
    JOB_OUTCOME,
    JOB_STALE,
    MESSAGING_BATCH_COUNT,
    MESSAGING_DESTINATION,
    MESSAGING_MESSAGE_ID,
    MESSAGING_OPERATION_TYPE,
    MESSAGING_SYSTEM,
    SCOPE,
    SYSTEM,
    Attributes,
    Totals,
    instruments,
)
from .otel_spans import ROOT, AttemptScope, LazySpan, end_parked, parse_traceparent, traceparent_of

if TYPE_CHECKING:
    from .finished import FinishedSpans

log = logging.getLogger(__name__)

_ERROR_TARGETS = frozenset({RETRYABLE, FAILED, DLQ})


def _finished_for(tracer: object) -> FinishedSpans | None:
    """:func:`.finished.for_tracer`, importing that module only for an SDK tracer.

    It imports the tracing SDK, which a worker would otherwise load (~75 ms
    on a busy machine) before its first claim; a tracer can only be the
    SDK's once the application has imported the SDK itself.
    """
    if not type(tracer).__module__.startswith("opentelemetry.sdk."):
        return None
    from .finished import for_tracer

    return for_tracer(tracer)


def _version() -> str:
    try:
        return importlib.metadata.version("awa-django")
    except importlib.metadata.PackageNotFoundError:
        return ""


class OtelObserver(Observer):
    """Records awa's metrics and spans through the OpenTelemetry API.

    ``tracer_provider`` / ``meter_provider``: where to record (default: the
    global providers, as configured by the application at any time, even
    after this observer was built).  ``trace_capture``: store the ambient
    ``traceparent`` in new jobs (``AWA["TRACE_CAPTURE"]``).
    """

    def __init__(
        self,
        *,
        trace_capture: bool = True,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        version = self._version = _version()
        self.trace_capture = trace_capture
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self.tracer = trace.get_tracer(SCOPE, version, tracer_provider=tracer_provider)
        self.meter = otel_metrics.get_meter(SCOPE, version, meter_provider=meter_provider)
        # Attempts whose span is open, by (job_id, run_lease): written on
        # handler threads, read on the event loop (single dict operations).
        self._open: dict[tuple[int, int], LazySpan] = {}
        self._deferred = idle.IdleWork()
        # Bound once: a bound method built per job is one more allocation.
        self._record_closes_work = self._record_closes
        self._process: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        self._tracing = False  # a real tracer provider was seen (see scoped)
        # (provider, its tracer, that tracer's span processors, fast path or None)
        self._finisher: tuple[Any, Any, Any, FinishedSpans | None] | None = None
        # Attribute names come from the table, values from the hooks.
        self._totals = {
            m.name: Totals(*m.attributes) for m in table.ALL if m.instrument == table.COUNTER
        }
        self._labels = {m.name: Attributes(*m.attributes) for m in table.ALL}
        gauges = self._gauges = ProcessGauges(
            self._labels[table.QUEUE_DEPTH.name], self._labels[table.QUEUE_LAG.name]
        )
        self.instruments = instruments(
            self.meter,
            self._totals,
            {
                table.QUEUE_DEPTH.name: gauges.depth,
                table.QUEUE_LAG.name: gauges.lag,
                table.OUTBOX_PENDING.name: gauges.outbox_pending,
                table.OUTBOX_LAG.name: gauges.outbox_lag,
                table.RUNTIME_UP.name: gauges.up,
                table.RUNTIME_LEADER.name: gauges.leader,
                table.INFLIGHT.name: gauges.inflight,
            },
        )
        totals, ins = self._totals, self.instruments
        self._enqueued = totals[table.ENQUEUED.name]
        self._claims = totals[table.CLAIMS.name]
        self._empty_claims = totals[table.EMPTY_CLAIMS.name]
        self._claimed = totals[table.CLAIMED.name]
        self._outcomes = totals[table.OUTCOMES.name]
        self._retries = totals[table.RETRIES.name]
        self._dlq = totals[table.DLQ_MOVES.name]
        self._stale = totals[table.STALE.name]
        self._rescues = totals[table.RESCUES.name]
        self._rotations = totals[table.ROTATIONS.name]
        self._prunes = totals[table.PRUNES.name]
        self._claim_duration = ins[table.CLAIM_DURATION.name]
        self._claim_labels = self._labels[table.CLAIM_DURATION.name]
        self._job_duration = ins[table.JOB_DURATION.name]
        # The closes of a chunk are grouped by attribute set (see .bulk).
        self._job_durations = bulk.BulkHistogram(self._job_duration)
        self._job_labels = self._labels[table.JOB_DURATION.name]
        self._task_duration = ins[table.TASK_DURATION.name]
        self._task_labels = self._labels[table.TASK_DURATION.name]

    @property
    def scoped(self) -> bool:  # type: ignore[override]
        """Whether spans are recorded: only once a real tracer provider (an
        SDK's) is there, given or global.  Until the application sets one,
        the hub builds no scope and no span per job (metrics are still
        counted: a meter provider may come later).  A global provider can be
        set once only, so once seen it is remembered."""
        if self._tracing:
            return True
        provider = self._tracer_provider or trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return False
        self._tracing = True
        return True

    # -- instruments -----------------------------------------------------------

    # -- producer side ---------------------------------------------------------

    def enqueue_scope(self, queue: str, count: int) -> AbstractContextManager[Any] | None:
        attributes: dict[str, Any] = {MESSAGING_SYSTEM: SYSTEM, MESSAGING_OPERATION_TYPE: "send"}
        if queue:
            attributes[MESSAGING_DESTINATION] = queue
        if count != 1:
            attributes[MESSAGING_BATCH_COUNT] = count
        return self.tracer.start_as_current_span(
            f"send {queue}" if queue else "send", kind=SpanKind.PRODUCER, attributes=attributes
        )

    def traceparent(self) -> str | None:
        if not self.trace_capture:
            return None
        context = trace.get_current_span().get_span_context()
        return traceparent_of(context) if context.is_valid else None

    def enqueued(self, jobs: Sequence[PreparedJob], ids: Sequence[int | None]) -> None:
        if len(jobs) == 1:
            if ids[0] is not None:
                self._enqueued.add((jobs[0].queue, jobs[0].kind))
            return
        written = Counter(
            (job.queue, job.kind) for job, job_id in zip(jobs, ids, strict=True) if job_id
        )
        for values, count in written.items():
            self._enqueued.add(values, count)

    # -- worker side -----------------------------------------------------------

    def claimed(self, queue: str, wanted: int, claimed: int, seconds: float) -> None:
        values = (queue,)
        self._claims.add(values)
        self._claim_duration.record(seconds, self._claim_labels(queue))
        if claimed:
            self._claimed.add(values, claimed)
            self._gauges.claimed(claimed)
        else:
            self._empty_claims.add(values)

    def attempt_scope(self, job: ClaimedJob) -> AbstractContextManager[Any] | None:
        # The span starts now (the handler is called right after) and is
        # found again by its attempt when the close comes.
        span = LazySpan(self, job)
        self._open[(job.job_id, job.run_lease)] = span
        return AttemptScope(span)

    def _process_fields(
        self, job: ClaimedJob, outcome: str | None
    ) -> tuple[str, dict[str, Any], SpanContext | None, list[Link] | None]:
        """Name, attributes, parent and links of an attempt's ``process`` span."""
        name, base = self._process_base(job.queue, job.kind)
        attributes = {**base, MESSAGING_MESSAGE_ID: str(job.job_id), JOB_ATTEMPT: job.attempt}
        if outcome is not None:
            attributes[JOB_OUTCOME] = outcome
        parent = parse_traceparent(job.metadata.get(TRACEPARENT_KEY)) if job.metadata else None
        if parent is None or job.attempt <= 1:
            # The first attempt continues the producer's trace.
            return name, attributes, parent, None
        # A retry: a trace of its own, linked to where the job was enqueued.
        return name, attributes, None, [Link(parent)]

    def _start_process(self, job: ClaimedJob, start_ns: int, outcome: str | None) -> Span:
        name, attributes, parent, links = self._process_fields(job, outcome)
        context = ROOT if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        return self.tracer.start_span(
            name,
            context=context,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=start_ns,
        )

    def _finished_spans(self) -> FinishedSpans | None:
        """The fast path for spans nobody touched, when the tracer allows it
        (see :mod:`.finished`); rechecked when the provider or its span
        processors change."""
        provider = self._tracer_provider or trace.get_tracer_provider()
        cached = self._finisher
        if cached is not None and cached[0] is provider:
            tracer, processors, found = cached[1], cached[2], cached[3]
            if getattr(getattr(tracer, "span_processor", None), "_span_processors", None) is (
                processors
            ):
                return found
        tracer = provider.get_tracer(SCOPE, self._version)
        found = _finished_for(tracer)
        processors = getattr(getattr(tracer, "span_processor", None), "_span_processors", None)
        self._finisher = (provider, tracer, processors, found)
        return found

    def _process_base(self, queue: str, kind: str) -> tuple[str, dict[str, Any]]:
        found = self._process.get((queue, kind))
        if found is None:
            found = (
                f"process {kind}",
                {
                    MESSAGING_SYSTEM: SYSTEM,
                    MESSAGING_DESTINATION: queue,
                    MESSAGING_OPERATION_TYPE: "process",
                    JOB_KIND: kind,
                },
            )
            if len(self._process) < CACHE_LIMIT:
                self._process[(queue, kind)] = found
        return found

    def closed(self, job: ClaimedJob, closure: Closure, applied: bool, seconds: float) -> None:
        self._gauges.settled()
        self._deferred.put(
            (self._record_closes_work, ((job, closure, applied),), seconds, time.time_ns())
        )

    def closed_many(
        self, closes: Sequence[tuple[ClaimedJob, Closure, bool]], seconds: float
    ) -> None:
        # One lock, one clock read and one item for the whole group.
        self._gauges.settled(len(closes))
        self._deferred.put((self._record_closes_work, closes, seconds, time.time_ns()))

    def _record_closes(
        self,
        closes: Sequence[tuple[ClaimedJob, Closure, bool]],
        seconds: float,
        end_ns: int,
    ) -> None:
        """Record a group of closes (:meth:`closed_many`), ended at ``end_ns``,
        with their attempts' spans.  This runs for every job, so the common
        case -- an applied close of an attempt whose span nobody touched --
        is spelled out here rather than through :meth:`_process_fields`
        (same attributes, same order)."""
        durations: dict[tuple[str, str, str], list[float]] = {}
        fast = self._finished_spans()  # once per group
        spans: list[Any] = []  # handed over together at the end
        process, pop = self._process, self._open.pop
        for job, closure, applied in closes:
            try:
                # The closure's label (a move to the DLQ says "failed":
                # awa.job.dlq counts the moves), as the Prometheus exporter
                # records it.
                outcome = closure.outcome
                target = closure.target
                lazy = pop((job.job_id, job.run_lease), None)
                if not applied:
                    self._stale.add((job.queue, job.kind))
                    if lazy is not None:
                        self._end_span(lazy, closure, applied, end_ns)
                    continue
                key = (job.queue, job.kind, outcome)
                found = durations.get(key)
                if found is None:
                    durations[key] = [seconds]
                else:
                    found.append(seconds)
                if target == RETRYABLE:
                    self._retries.add(key[:2])
                elif target == DLQ:
                    self._dlq.add(key[:2])
                if lazy is None:
                    continue  # no handler ran (an unknown kind, arguments that no longer fit)
                if fast is None or lazy._real is not None or target in _ERROR_TARGETS:
                    self._end_span(lazy, closure, applied, end_ns)
                    continue
                metadata = job.metadata
                parent = parse_traceparent(metadata.get(TRACEPARENT_KEY)) if metadata else None
                links = None
                if parent is not None and job.attempt > 1:
                    links, parent = [Link(parent)], None  # a retry: a root linked to the enqueue
                name, base = process.get(key[:2]) or self._process_base(job.queue, job.kind)
                decided = fast.decide(name, parent, links)
                if decided is None:
                    continue  # sampled out: nothing more to build
                attributes = {
                    **base,
                    MESSAGING_MESSAGE_ID: str(job.job_id),
                    JOB_ATTEMPT: job.attempt,
                    JOB_OUTCOME: outcome,
                }
                fast.record(name, attributes, parent, links, lazy.start_ns, end_ns, spans, decided)
            except Exception:
                log.exception("recording the close of job %s failed", job.job_id)
        if fast is not None:
            try:
                fast.hand_over(spans)
            except Exception:
                log.exception("handing %s spans to the span processors failed", len(spans))
        labels, histogram = self._job_labels, self._job_durations
        for key, seconds_each in durations.items():
            self._outcomes.add(key, len(seconds_each))
            try:
                histogram.record_many(key, labels(*key), seconds_each)
            except Exception:
                log.exception("recording awa.job.duration failed")

    def _end_span(self, lazy: LazySpan, closure: Closure, applied: bool, end_ns: int) -> None:
        """End an attempt's span the SDK's way: it was touched while the
        attempt ran, the attempt failed, or the fast path does not apply."""
        outcome = closure.outcome
        if lazy.built:
            span = lazy.real()
            span.set_attribute(JOB_OUTCOME, outcome)
        else:
            span = lazy.real(outcome)
        if not applied:
            span.set_attribute(JOB_STALE, True)
        if closure.target in _ERROR_TARGETS:
            error = lazy.error
            if error is not None and is_sealed_job(lazy._job):
                # Its message may hold the sealed payload: the type only.
                withheld = shown(lazy._job, error)
                span.add_event("exception", {"exception.type": type(error).__qualname__})
                description = repr(withheld)
            elif error is not None:
                span.record_exception(error)
                description = f"{type(error).__name__}: {error}"
            else:
                description = closure.reason or outcome
            span.set_status(Status(StatusCode.ERROR, description))
        span.end(end_ns)

    def parked(self, job: ClaimedJob) -> None:
        self._gauges.settled()
        lazy = self._open.pop((job.job_id, job.run_lease), None)
        if lazy is not None:
            self._deferred.put((end_parked, lazy, time.time_ns()))

    def maintained(self, task: str, result: object, seconds: float) -> None:
        self._task_duration.record(seconds, self._task_labels(task))
        if task.endswith("_ring") and isinstance(result, dict):
            ring = task.removesuffix("_ring")
            rotated, pruned = result.get("rotate"), result.get("prune")
            if isinstance(rotated, str):
                self._rotations.add((ring, rotated))
            if isinstance(pruned, str):
                self._prunes.add((ring, pruned))

    def rescued(self, reason: str, count: int) -> None:
        self._rescues.add((reason,), count)

    def queues_sampled(self, samples: Sequence[QueueSample]) -> None:
        self._gauges.sampled(samples)

    def outbox_sampled(self, pending: int, lag: float) -> None:
        self._gauges.outbox_sampled(pending, lag)

    def runtime(self, state: str) -> None:
        self._gauges.runtime(state)
        if state == "stopped":
            self._abandon_open()

    def flush(self, timeout: float) -> None:
        """Export what the SDK buffered (spans, metrics), within ``timeout`` overall."""
        deadline = time.monotonic() + timeout
        self._deferred.drain()
        for provider in (
            self._tracer_provider or trace.get_tracer_provider(),
            self._meter_provider or otel_metrics.get_meter_provider(),
        ):
            force_flush = getattr(provider, "force_flush", None)
            left = deadline - time.monotonic()
            if force_flush is not None and left > 0:
                force_flush(int(left * 1000))

    def _abandon_open(self) -> None:
        """End the spans of attempts this process will not close (it stops)."""
        self._deferred.drain()
        left, self._open = self._open, {}
        for lazy in left.values():
            lazy.real("abandoned").end()
