"""OpenTelemetry metrics and spans (the ``otel`` extra: ``awa-django[otel]``).

Only ``opentelemetry-api`` is imported here.  The observer takes its
tracer and meter from the global providers the application configures
with the SDK (or from providers it is given), so a process that never sets
one records into the API's no-op implementations, and a process without the
extra never imports this module (:mod:`.install` looks the package up
without importing it).

Metrics
    One instrument per entry of :data:`.metrics.ALL`, built from the table
    (name, kind, unit, description, attribute names), so OpenTelemetry and
    Prometheus agree on every name.  Histograms are recorded as things
    happen.  Counters are asynchronous (observable) counters over running
    totals the hooks keep per attribute set: counting a job is a dict update,
    not a call into the SDK (the exported data is the same monotonic sum;
    only exemplars are left out).  Gauges are observable too and read what
    the hooks left behind: the leader's last queue sample
    (``awa.queue.depth``/``awa.queue.lag``, reported by the leader only, and
    dropped when it steps down or the sample grows old) and this process's
    runtime state.

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
    :class:`_LazySpan` current (a start time, no SDK span yet), and closing
    an attempt appends one item to a queue (:mod:`.idle`) that the event
    loop works off when nothing else is ready to run -- while the worker
    waits on PostgreSQL: the span, handed to the span processors already
    finished with the recorded start and end times and the outcome among
    its attributes (:mod:`.finished`), the duration histogram (grouped per
    attribute set, :mod:`.bulk`), the outcome counts.  A handler that looks
    at its span (a child span, ``get_current_span()``, an enqueue capturing
    the traceparent) builds the SDK span at once.  ``awa_bench --telemetry
    both`` measures what is left.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TracerProvider,
)
from opentelemetry.trace.propagation import _SPAN_KEY

from ..payload import TRACEPARENT_KEY
from ..records import DLQ, FAILED, RETRYABLE, ClaimedJob, Closure, PreparedJob
from . import bulk, finished, idle
from . import metrics as table
from .hooks import Observer, QueueSample

log = logging.getLogger(__name__)

#: The instrumentation scope: what a backend shows as the library that
#: produced a span or a metric.
SCOPE = "awa_django"

# Semantic-convention attribute names (messaging spans).
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_MESSAGE_ID = "messaging.message.id"
MESSAGING_BATCH_COUNT = "messaging.batch.message_count"
SYSTEM = "awa"
# awa's own span attributes.
JOB_KIND = "awa.job.kind"
JOB_ATTEMPT = "awa.job.attempt"
JOB_OUTCOME = "awa.job.outcome"
JOB_STALE = "awa.job.stale"

#: Histogram buckets (seconds) of the ``s`` histograms: job and claim
#: durations run from sub-millisecond no-ops to minutes-long handlers.
SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

#: A queue sample older than this is not reported (four intervals of the
#: leader's ``queue_gauges`` task): a leader that stopped sampling must not
#: freeze its last reading into the dashboards.
SAMPLE_MAX_AGE = 60.0

# Attribute dicts cached per key are bounded: a pathological number of
# queues or kinds must not grow the process without end.
_CACHE_LIMIT = 4096

_ERROR_TARGETS = frozenset({RETRYABLE, FAILED, DLQ})
_ROOT = otel_context.Context()  # an empty context: a span started in it is a root


def _context_variable() -> ContextVar[Context] | None:
    """The context variable behind OpenTelemetry's current context, when the
    runtime context is the API's default (``contextvars``) and its key for
    the current span is where this module looks; None otherwise (another
    ``OTEL_PYTHON_CONTEXT``, another API release): then the API's functions
    are used.  The attempt scope sets it directly: it runs for every job."""
    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    if type(runtime) is not ContextVarsRuntimeContext:
        return None
    variable = getattr(runtime, "_current_context", None)
    if not isinstance(variable, ContextVar):
        return None
    probe = NonRecordingSpan(SpanContext(1, 2, False))
    made = trace.set_span_in_context(probe, _ROOT)
    if dict(made) != {_SPAN_KEY: probe} or trace.get_current_span(made) is not probe:
        return None
    return variable


_CURRENT = _context_variable()


def traceparent_of(context: SpanContext) -> str:
    """``context`` in the W3C ``traceparent`` format (version 00)."""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def parse_traceparent(value: object) -> SpanContext | None:
    """The remote span context a W3C ``traceparent`` names; None if ``value``
    is not one (unknown versions are read by their version-00 prefix, as
    the W3C spec asks)."""
    if not isinstance(value, str) or len(value) < 55:
        return None
    version, trace_id, span_id, flags = value[:2], value[3:35], value[36:52], value[53:55]
    if value[2] != "-" or value[35] != "-" or value[52] != "-" or version == "ff":
        return None
    if version == "00" and len(value) != 55:
        return None
    try:
        context = SpanContext(
            int(trace_id, 16),
            int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(int(flags, 16)),
        )
        int(version, 16)
    except ValueError:
        return None
    return context if context.is_valid else None


class _Attributes:
    """Attribute dicts for one set of attribute names, one per value tuple.

    Instruments get the same dict object for the same values, built once:
    nothing is allocated per job.
    """

    __slots__ = ("_cache", "_names")

    def __init__(self, *names: str) -> None:
        self._names = names
        self._cache: dict[tuple[str, ...], dict[str, str]] = {}

    def __call__(self, *values: str) -> dict[str, str]:
        attributes = self._cache.get(values)
        if attributes is None:
            attributes = dict(zip(self._names, values, strict=True))
            if len(self._cache) < _CACHE_LIMIT:
                self._cache[values] = attributes
        return attributes


class _Totals:
    """Running totals of one counter per attribute values, reported by an
    observable counter.  Adding is a dict update under a lock (producer
    threads count enqueues concurrently); no SDK call per event."""

    __slots__ = ("_lock", "_names", "_totals")

    def __init__(self, *names: str) -> None:
        self._names = names
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, ...], list[Any]] = {}

    def add(self, values: tuple[str, ...], amount: int = 1) -> None:
        with self._lock:
            entry = self._totals.get(values)
            if entry is None:
                self._totals[values] = [dict(zip(self._names, values, strict=True)), amount]
            else:
                entry[1] += amount

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            entries = [(attributes, total) for attributes, total in self._totals.values()]
        return [Observation(total, attributes) for attributes, total in entries]


def _version() -> str:
    try:
        return importlib.metadata.version("awa-django")
    except importlib.metadata.PackageNotFoundError:
        return ""


class _LazySpan(Span):
    """An attempt's ``process`` span, built only when someone looks at it.

    The SDK spends tens of microseconds building a span (ids, the sampler,
    attribute validation, the processor hand-off), as much again as the
    whole claim-run-close of a no-op job.  So the attempt scope records the
    start time and makes this stand-in the ambient span; the real span is
    built with that start time by whoever needs it first: the handler (a
    child span, ``trace.get_current_span()``, a traceparent captured by an
    enqueue inside it) on its own thread, or -- for most jobs -- the
    observer's idle-time work after the outcome is durable, with the
    outcome among its first attributes.  Every method forwards to the real
    span; building it is done once, under a lock.
    """

    __slots__ = ("_job", "_observer", "_real", "error", "start_ns")

    #: Serialises building (rare: most spans are recorded finished, see
    #: :mod:`.finished`).  One lock for all: allocating a lock per attempt
    #: cost more than the rest of the stand-in.
    _build_lock = threading.Lock()

    def __init__(self, observer: OtelObserver, job: ClaimedJob) -> None:
        self._observer = observer
        self._job = job
        self._real: Span | None = None
        self.start_ns = time.time_ns()
        #: The exception the handler raised, if it raised one (its meaning is
        #: known once the closure is).
        self.error: BaseException | None = None

    def real(self, outcome: str | None = None) -> Span:
        """The SDK's span, built now if nobody asked for it before
        (``outcome``: an attribute it starts with)."""
        real = self._real
        if real is None:
            with self._build_lock:
                real = self._real
                if real is None:
                    real = self._real = self._observer._start_process(
                        self._job, self.start_ns, outcome
                    )
        return real

    @property
    def built(self) -> bool:
        return self._real is not None

    def end(self, end_time: int | None = None) -> None:
        self.real().end(end_time)

    def get_span_context(self) -> SpanContext:
        return self.real().get_span_context()

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.real().set_attributes(attributes)

    def set_attribute(self, key: str, value: Any) -> None:
        self.real().set_attribute(key, value)

    def add_event(
        self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None
    ) -> None:
        self.real().add_event(name, attributes, timestamp)

    def add_link(self, context: SpanContext, attributes: Mapping[str, Any] | None = None) -> None:
        self.real().add_link(context, attributes)

    def update_name(self, name: str) -> None:
        self.real().update_name(name)

    def is_recording(self) -> bool:
        return self.real().is_recording()

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        self.real().set_status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self.real().record_exception(exception, attributes, timestamp, escaped)


class _AttemptScope:
    """Makes the attempt's (lazy) span the ambient context while the handler runs."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: _LazySpan) -> None:
        self._span = span

    def __enter__(self) -> Span:
        span = self._span
        if _CURRENT is None:
            self._token = otel_context.attach(trace.set_span_in_context(span))
        else:  # what attach(set_span_in_context(span)) does, without four calls
            current = _CURRENT.get()
            self._token = _CURRENT.set(
                Context({**current, _SPAN_KEY: span}) if current else Context({_SPAN_KEY: span})
            )
        return span

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if _CURRENT is None:
            otel_context.detach(self._token)
        else:
            try:
                _CURRENT.reset(self._token)
            except ValueError:  # as detach() does: say so, do not fail the attempt
                log.exception("Failed to detach context")
        if exc is None:
            return
        span = self._span
        if isinstance(exc, Exception):
            span.error = exc
            return
        # Cancelled (shutdown) or interrupted: no closure will come from here.
        job = span._job
        span._observer._open.pop((job.job_id, job.run_lease), None)
        real = span.real("interrupted")
        real.record_exception(exc)
        real.end()


def _end_parked(lazy: _LazySpan, end_ns: int) -> None:
    lazy.real("waiting_external").end(end_ns)


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
        self._open: dict[tuple[int, int], _LazySpan] = {}
        self._deferred = idle.IdleWork()
        # Bound once: a bound method built per job is one more allocation.
        self._record_closes_work = self._record_closes
        self._process: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
        self._samples: tuple[float, Sequence[QueueSample]] | None = None
        self._up: bool | None = None  # None until this process runs a worker
        self._leader = False
        # Attempts claimed and not yet closed or parked (awa.runtime.inflight).
        self._running = 0
        self._running_lock = threading.Lock()
        self._tracing = False  # a real tracer provider was seen (see scoped)
        # (provider, its tracer, that tracer's span processors, fast path or None)
        self._finisher: tuple[Any, Any, Any, finished.FinishedSpans | None] | None = None
        # Attribute names come from the table, values from the hooks.
        self._totals = {
            m.name: _Totals(*m.attributes) for m in table.ALL if m.instrument == table.COUNTER
        }
        self._labels = {m.name: _Attributes(*m.attributes) for m in table.ALL}
        self.instruments = self._instruments(self.meter)
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
        self._depth_labels = self._labels[table.QUEUE_DEPTH.name]
        self._lag_labels = self._labels[table.QUEUE_LAG.name]

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

    def _instruments(self, meter: Meter) -> dict[str, Any]:
        """One instrument per entry of the metrics table."""
        gauges: dict[str, Callable[[CallbackOptions], Iterable[Observation]]] = {
            table.QUEUE_DEPTH.name: self._observe_depth,
            table.QUEUE_LAG.name: self._observe_lag,
            table.RUNTIME_UP.name: self._observe_up,
            table.RUNTIME_LEADER.name: self._observe_leader,
            table.INFLIGHT.name: self._observe_inflight,
        }
        built: dict[str, Any] = {}
        for metric in table.ALL:
            if metric.instrument == table.COUNTER:
                built[metric.name] = meter.create_observable_counter(
                    metric.name,
                    callbacks=[self._totals[metric.name].observe],
                    unit=metric.unit,
                    description=metric.description,
                )
            elif metric.instrument == table.HISTOGRAM:
                built[metric.name] = meter.create_histogram(
                    metric.name,
                    unit=metric.unit,
                    description=metric.description,
                    explicit_bucket_boundaries_advisory=(
                        SECONDS_BUCKETS if metric.unit == "s" else None
                    ),
                )
            elif metric.instrument == table.GAUGE:
                built[metric.name] = meter.create_observable_gauge(
                    metric.name,
                    callbacks=[gauges[metric.name]],
                    unit=metric.unit,
                    description=metric.description,
                )
            else:
                raise ValueError(f"{metric.name}: unknown instrument {metric.instrument!r}")
        return built

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
            with self._running_lock:
                self._running += claimed
        else:
            self._empty_claims.add(values)

    def attempt_scope(self, job: ClaimedJob) -> AbstractContextManager[Any] | None:
        # The span starts now (the handler is called right after) and is
        # found again by its attempt when the close comes.
        span = _LazySpan(self, job)
        self._open[(job.job_id, job.run_lease)] = span
        return _AttemptScope(span)

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
        context = _ROOT if parent is None else trace.set_span_in_context(NonRecordingSpan(parent))
        return self.tracer.start_span(
            name,
            context=context,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=start_ns,
        )

    def _finished_spans(self) -> finished.FinishedSpans | None:
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
        found = finished.for_tracer(tracer)
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
            if len(self._process) < _CACHE_LIMIT:
                self._process[(queue, kind)] = found
        return found

    def closed(self, job: ClaimedJob, closure: Closure, applied: bool, seconds: float) -> None:
        self._settled()
        self._deferred.put(
            (self._record_closes_work, ((job, closure, applied),), seconds, time.time_ns())
        )

    def closed_many(
        self, closes: Sequence[tuple[ClaimedJob, Closure, bool]], seconds: float
    ) -> None:
        # One lock, one clock read and one item for the whole group.
        with self._running_lock:
            self._running = max(self._running - len(closes), 0)
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

    def _end_span(self, lazy: _LazySpan, closure: Closure, applied: bool, end_ns: int) -> None:
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
            if error is not None:
                span.record_exception(error)
                description = f"{type(error).__name__}: {error}"
            else:
                description = closure.reason or outcome
            span.set_status(Status(StatusCode.ERROR, description))
        span.end(end_ns)

    def _settled(self) -> None:
        with self._running_lock:
            self._running = max(self._running - 1, 0)

    def parked(self, job: ClaimedJob) -> None:
        self._settled()
        lazy = self._open.pop((job.job_id, job.run_lease), None)
        if lazy is not None:
            self._deferred.put((_end_parked, lazy, time.time_ns()))

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
        self._samples = (time.monotonic(), tuple(samples))

    def runtime(self, state: str) -> None:
        if state == "started":
            self._up = True
        elif state == "stopped":
            self._up = False
            self._leader = False
            with self._running_lock:
                self._running = 0  # attempts handed back or interrupted on the way out
            self._abandon_open()
        elif state == "leader":
            self._leader = True
        elif state == "follower":
            self._leader = False
            self._samples = None  # the next leader reports the queues

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

    # -- observable gauges -------------------------------------------------------

    def _fresh_samples(self) -> Sequence[QueueSample]:
        taken = self._samples
        if taken is None or time.monotonic() - taken[0] > SAMPLE_MAX_AGE:
            return ()
        return taken[1]

    def _observe_depth(self, options: CallbackOptions) -> Iterable[Observation]:
        for sample in self._fresh_samples():
            for state, value in (
                ("available", sample.available),
                ("scheduled", sample.scheduled),
                ("running", sample.running),
            ):
                yield Observation(value, self._depth_labels(sample.queue, state))

    def _observe_lag(self, options: CallbackOptions) -> Iterable[Observation]:
        for sample in self._fresh_samples():
            yield Observation(sample.lag, self._lag_labels(sample.queue))

    def _observe_up(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._up is not None:
            yield Observation(1 if self._up else 0)

    def _observe_leader(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._up is not None:
            yield Observation(1 if self._leader else 0)

    def _observe_inflight(self, options: CallbackOptions) -> Iterable[Observation]:
        if self._up is not None:
            yield Observation(self._running)
