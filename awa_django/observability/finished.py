"""Recording a ``process`` span that is already over, without a live SDK span.

Most attempts' spans are never touched while they run (the handler opens no
child span and reads no context): the observer knows everything about such
a span -- name, attributes, parent or link, start, end, outcome -- only once
the attempt is closed.  Building it then through ``Tracer.start_span`` and
``Span.end`` pays for machinery a finished span does not need (the live
span's lock, attribute re-validation, ``on_start``, the end-time
bookkeeping): about five times what handing the span processors a
``ReadableSpan`` costs.  On a busy worker that difference is most of what
tracing costs per job.

:class:`FinishedSpans` does the second: it asks the tracer's sampler, draws
the ids from its generator and gives the tracer's span processor a finished
span, so sampling, resource, instrumentation scope and export behave as the
SDK's own spans do.  It is only used where that is indistinguishable from
the SDK's path: an SDK tracer that is enabled, whose span processors are
all the SDK's batch or simple processors (their ``on_start`` does nothing);
any other setup -- a custom processor, a vendor SDK, tracing off -- gets
the ordinary span (:func:`for_tracer` returns None).

Even the ``ReadableSpan`` and ``SpanContext`` constructors are half of
what is left per span (keyword arguments, id range checks the generator
already guarantees), so a span is a :class:`FinishedSpan` (a
``ReadableSpan`` whose constructor takes positional arguments), its
context is built as the tuple ``SpanContext`` is, and sampled spans go
straight to the queue of a lone ``BatchSpanProcessor``.  Each shortcut is
checked against the installed SDK once, when the tracer is first seen;
where its layout differs the constructors and ``on_end`` are used.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import DEFAULT_TRACE_STATE
from opentelemetry.trace.status import Status, StatusCode

try:  # the SDK is part of the otel extra, but an application may bring its own
    from opentelemetry.sdk._shared_internal import BatchProcessor
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import Tracer as SdkTracer
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import (
        ALWAYS_OFF,
        ALWAYS_ON,
        DEFAULT_ON,
        ParentBased,
        ParentBasedTraceIdRatio,
        StaticSampler,
        TraceIdRatioBased,
    )
except ImportError:  # pragma: no cover - exercised only without the SDK
    SdkTracer = ReadableSpan = BatchProcessor = None  # type: ignore[assignment,misc]
    ALWAYS_ON = ALWAYS_OFF = DEFAULT_ON = None  # type: ignore[assignment]
    StaticSampler = TraceIdRatioBased = ParentBased = ParentBasedTraceIdRatio = None  # type: ignore[assignment,misc]

_ROOT = otel_context.Context()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
_KIND = SpanKind.CONSUMER
_UNSET = Status(StatusCode.UNSET)
_new_tuple = tuple.__new__


if ReadableSpan is not None:

    class FinishedSpan(ReadableSpan):
        """A ``ReadableSpan`` of a consumer span that is over, built from
        positional arguments: the same fields, set the same way as the SDK's
        constructor sets them, at less than half its cost (no keyword
        matching, no defaults to resolve).  Used only where
        :func:`_fields_match` found the layouts equal."""

        __slots__ = ()

        def __init__(
            self,
            name: str,
            context: SpanContext,
            parent: SpanContext | None,
            attributes: Mapping[str, Any],
            links: Sequence[Link],
            start_time: int,
            end_time: int,
            resource: Any,
            scope: Any,
        ) -> None:
            self._name = name
            self._context = context
            self._kind = _KIND
            self._instrumentation_info = None
            self._instrumentation_scope = scope
            self._parent = parent
            self._start_time = start_time
            self._end_time = end_time
            self._attributes = attributes
            self._events = ()
            self._links = links
            self._resource = resource
            self._status = _UNSET


def _fields_match(resource: Any, scope: Any) -> bool:
    """Whether :class:`FinishedSpan` holds exactly what the installed SDK's
    ``ReadableSpan`` constructor stores for the same span (another release
    may store more or differently: then the constructor is used)."""
    context = SpanContext(1, 2, False, _SAMPLED, DEFAULT_TRACE_STATE)
    parent = SpanContext(3, 4, True, _SAMPLED, DEFAULT_TRACE_STATE)
    attributes = {"a": "b"}
    links = (Link(parent),)
    sdk = ReadableSpan(
        name="n",
        context=context,
        parent=parent,
        resource=resource,
        attributes=attributes,
        links=links,
        kind=_KIND,
        start_time=5,
        end_time=6,
        instrumentation_scope=scope,
    )
    ours = vars(FinishedSpan("n", context, parent, attributes, links, 5, 6, resource, scope))
    theirs = vars(sdk)
    if ours.keys() != theirs.keys():
        return False
    status, default = ours.pop("_status"), theirs.pop("_status")
    same_status = (status.status_code, status.description) == (
        default.status_code,
        default.description,
    )
    return same_status and ours == theirs


def _context_layout_known() -> bool:
    """Whether ``SpanContext`` is the tuple this module builds directly for a
    valid, local span context (skipping its id validation: the ids come
    from the tracer's generator or a parent already checked valid)."""
    made = SpanContext(1, 2, False, _SAMPLED, DEFAULT_TRACE_STATE)
    direct = _new_tuple(SpanContext, (1, 2, False, _SAMPLED, DEFAULT_TRACE_STATE, True))
    return tuple(made) == tuple(direct) and made == direct and direct.is_valid


def _lone_batcher(processor: Any) -> Any:
    """The SDK batch queue behind the tracer's only span processor, a
    ``BatchSpanProcessor``; None for any other set of processors."""
    processors: Sequence[Any] = getattr(processor, "_span_processors", ())
    if len(processors) == 1 and type(processors[0]) is BatchSpanProcessor:
        batcher = getattr(processors[0], "_batch_processor", None)
        if type(batcher) is BatchProcessor:
            return batcher
    return None


def _queue_many(processor: Any) -> Any:
    """A function that hands a list of sampled finished spans over at once.

    ``BatchProcessor.emit`` checks for shutdown and fork, appends one span to
    its queue and wakes the export thread once a batch is full: per span,
    a third of building it.  For the SDK's batch queue, as laid out in the
    releases this was checked against (every field below present), a list
    goes in with one ``extendleft`` -- the order ``emit`` one at a time
    would leave -- after the same checks, made once; anything unusual (shut
    down, forked, a queue that would overflow and must drop with a warning)
    goes through ``emit`` span by span.  Other processors get their
    ``on_end`` per span."""
    batcher = _lone_batcher(processor)
    fields = ("_shutdown", "_pid", "_queue", "_max_queue_size", "_max_export_batch_size")
    if batcher is None or not all(hasattr(batcher, f) for f in (*fields, "_worker_awaken")):
        emit = processor.on_end if batcher is None else batcher.emit

        def one_by_one(spans: list[Any]) -> None:
            for span in spans:
                emit(span)

        return one_by_one
    queue = batcher._queue

    def queue_many(spans: list[Any]) -> None:
        if (
            batcher._shutdown
            or batcher._pid != os.getpid()
            or len(queue) + len(spans) >= batcher._max_queue_size
            or batcher._queue is not queue
        ):
            for span in spans:
                batcher.emit(span)
            return
        queue.extendleft(spans)
        if len(queue) >= batcher._max_export_batch_size:
            awaken = batcher._worker_awaken
            if not awaken.is_set():
                awaken.set()

    return queue_many


#: What :meth:`FinishedSpans.decide` returns to record a span: trace id,
#: trace flags, trace state and the attributes the sampler adds (or None).
Decided = tuple[int, TraceFlags, Any, Mapping[str, Any] | None]
#: :meth:`FinishedSpans.decide`: the sampler has to see the attributes.
UNDECIDED: Final = object()
#: :meth:`FinishedSpans.decide`: a root span the default sampler records
#: (its trace id is drawn when the span is built).
ROOT_SAMPLED: Final = object()

#: ``ParentBased``'s delegates, by the names the SDK keeps them under.
_DELEGATES = (
    "_root",
    "_remote_parent_sampled",
    "_remote_parent_not_sampled",
    "_local_parent_sampled",
    "_local_parent_not_sampled",
)

#: Whether a span with this trace id and parent is sampled.
Verdict = Callable[[int, "SpanContext | None"], bool]


def _verdict(sampler: Any) -> Verdict | None:
    """``sampler``'s decision as a plain function of the trace id and the
    parent, for the SDK's own samplers (always on/off, trace-id ratio,
    parent-based over those; exact types, a subclass may decide otherwise):
    asking ``should_sample`` costs more than a microsecond per span, most
    of it building a result for a span that is then dropped.  None for any
    other sampler (it is asked, with the span's attributes)."""
    if StaticSampler is None:
        return None
    if sampler is ALWAYS_ON:
        return lambda trace_id, parent: True
    if sampler is ALWAYS_OFF:
        return lambda trace_id, parent: False
    if type(sampler) is TraceIdRatioBased:
        bound, limit = sampler.bound, TraceIdRatioBased.TRACE_ID_LIMIT
        return lambda trace_id, parent: trace_id & limit < bound
    if type(sampler) in (ParentBased, ParentBasedTraceIdRatio):
        parts = [_verdict(getattr(sampler, name, None)) for name in _DELEGATES]
        if any(part is None for part in parts):
            return None
        root, remote_sampled, remote_not, local_sampled, local_not = parts

        def parent_based(trace_id: int, parent: SpanContext | None) -> bool:
            if parent is None or not parent.is_valid:
                chosen = root
            elif parent.is_remote:
                chosen = remote_sampled if parent.trace_flags.sampled else remote_not
            else:
                chosen = local_sampled if parent.trace_flags.sampled else local_not
            return chosen(trace_id, parent)  # type: ignore[misc]

        return parent_based
    return None


class FinishedSpans:
    """Hands an SDK tracer's span processor spans that are already over."""

    __slots__ = (
        "_direct_context",
        "_emit_many",
        "_ids",
        "_processor",
        "_resource",
        "_roots_sampled",
        "_sampler",
        "_scope",
        "_span",
        "_verdict",
    )

    def __init__(self, tracer: Any) -> None:
        self._sampler = tracer.sampler
        # The SDK's default sampler (and always-on) record and sample every
        # root span, with no attributes or trace state of their own: asking
        # them would only build a SamplingResult that says so.  Any other
        # sampler, or a span with a parent, is asked.
        self._roots_sampled = self._sampler is DEFAULT_ON or self._sampler is ALWAYS_ON
        self._verdict = _verdict(self._sampler)
        self._ids = tracer.id_generator
        self._resource = tracer.resource
        self._processor = tracer.span_processor
        self._scope = tracer._instrumentation_scope
        self._span = FinishedSpan if _fields_match(self._resource, self._scope) else _sdk_span
        self._direct_context = _context_layout_known()
        self._emit_many = _queue_many(self._processor)

    def decide(
        self, name: str, parent: SpanContext | None, links: Sequence[Link] | None
    ) -> Decided | object | None:
        """The sampling decision for a span, made before its attributes are
        built: ``(trace_id, flags, trace_state, attributes the sampler
        adds)`` or :data:`ROOT_SAMPLED` to record it, None to drop it, or
        :data:`UNDECIDED` when the sampler has to be asked with the
        attributes (then :meth:`record` asks it).  With the SDK's own
        samplers a span the sampler drops costs a trace id and a comparison
        (see :func:`_verdict`)."""
        if parent is None and self._roots_sampled:
            return ROOT_SAMPLED
        verdict = self._verdict
        if verdict is None:
            return UNDECIDED
        if parent is None:
            trace_id, trace_state = self._ids.generate_trace_id(), DEFAULT_TRACE_STATE
        else:
            trace_id = parent.trace_id
            trace_state = parent.trace_state if parent.is_valid else DEFAULT_TRACE_STATE
        if not verdict(trace_id, parent):
            return None
        return (trace_id, _SAMPLED, trace_state, None)

    def _ask(
        self,
        name: str,
        attributes: Mapping[str, Any] | None,
        parent: SpanContext | None,
        links: Sequence[Link] | None,
    ) -> Decided | None:
        if parent is None:
            trace_id = self._ids.generate_trace_id()
            context = _ROOT
        else:
            trace_id = parent.trace_id
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        result = self._sampler.should_sample(context, trace_id, name, _KIND, attributes, links)
        decision = result.decision
        if not decision.is_recording():
            return None
        return (
            trace_id,
            _SAMPLED if decision.is_sampled() else _NOT_SAMPLED,
            result.trace_state or DEFAULT_TRACE_STATE,
            result.attributes or None,
        )

    def record(
        self,
        name: str,
        attributes: Mapping[str, Any],
        parent: SpanContext | None,
        links: Sequence[Link] | None,
        start_ns: int,
        end_ns: int,
        into: list[Any] | None = None,
        decided: Decided | object | None = UNDECIDED,
    ) -> None:
        """Record one consumer span from ``start_ns`` to ``end_ns`` (a child of
        ``parent`` when given, else a root with ``links``), as ``decided``
        (:meth:`decide`; asked now by default).  With ``into``, a sampled
        span is appended there for :meth:`hand_over` instead of being handed
        over at once."""
        if decided is UNDECIDED:
            decided = self.decide(name, parent, links)
            if decided is UNDECIDED:
                decided = self._ask(name, attributes, parent, links)
        if decided is ROOT_SAMPLED:
            trace_id = self._ids.generate_trace_id()
            flags, trace_state = _SAMPLED, DEFAULT_TRACE_STATE
        elif decided is None:
            return
        else:
            trace_id, flags, trace_state, added = cast(Decided, decided)
            if added:
                attributes = {**attributes, **added}
        span_id = self._ids.generate_span_id()
        if self._direct_context and trace_id and span_id:
            span_context = _new_tuple(
                SpanContext, (trace_id, span_id, False, flags, trace_state, True)
            )
        else:
            span_context = SpanContext(
                trace_id, span_id, is_remote=False, trace_flags=flags, trace_state=trace_state
            )
        span = self._span(
            name,
            span_context,
            parent,
            attributes,
            links or (),
            start_ns,
            end_ns,
            self._resource,
            self._scope,
        )
        if flags is not _SAMPLED:
            self._processor.on_end(span)  # recorded, not sampled: the processors decide
        elif into is None:
            self._emit_many([span])
        else:
            into.append(span)

    def hand_over(self, spans: list[Any]) -> None:
        """Hand the span processors the sampled spans :meth:`record` collected."""
        if spans:
            self._emit_many(spans)


#: :class:`FinishedSpan`'s positional arguments, as ``ReadableSpan`` names them.
_FIELDS = (
    "name",
    "context",
    "parent",
    "attributes",
    "links",
    "start_time",
    "end_time",
    "resource",
    "instrumentation_scope",
)


def _sdk_span(*fields: Any) -> Any:
    """:class:`FinishedSpan`'s arguments through the SDK's own constructor."""
    return ReadableSpan(kind=_KIND, **dict(zip(_FIELDS, fields, strict=True)))


def for_tracer(tracer: object) -> FinishedSpans | None:
    """The fast path for ``tracer`` when it behaves exactly like the SDK's
    spans (see the module docstring), else None."""
    if SdkTracer is None or type(tracer) is not SdkTracer:
        return None
    enabled = getattr(tracer, "_is_enabled", None)
    if enabled is not None and not enabled():
        return None
    processors = getattr(tracer.span_processor, "_span_processors", None)
    if processors is None or not hasattr(tracer, "_instrumentation_scope"):
        return None
    if not all(type(p) in (BatchSpanProcessor, SimpleSpanProcessor) for p in processors):
        return None
    return FinishedSpans(tracer)
