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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, TraceFlags

try:  # the SDK is part of the otel extra, but an application may bring its own
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace import Tracer as SdkTracer
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, DEFAULT_ON
except ImportError:  # pragma: no cover - exercised only without the SDK
    SdkTracer = None  # type: ignore[assignment,misc]
    ALWAYS_ON = DEFAULT_ON = None  # type: ignore[assignment]

_ROOT = otel_context.Context()
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)


class FinishedSpans:
    """Hands an SDK tracer's span processor spans that are already over."""

    __slots__ = ("_ids", "_processor", "_resource", "_roots_sampled", "_sampler", "_scope")

    def __init__(self, tracer: Any) -> None:
        self._sampler = tracer.sampler
        # The SDK's default sampler (and always-on) record and sample every
        # root span, with no attributes or trace state of their own: asking
        # them would only build a SamplingResult that says so.  Any other
        # sampler, or a span with a parent, is asked.
        self._roots_sampled = self._sampler is DEFAULT_ON or self._sampler is ALWAYS_ON
        self._ids = tracer.id_generator
        self._resource = tracer.resource
        self._processor = tracer.span_processor
        self._scope = tracer._instrumentation_scope

    def record(
        self,
        name: str,
        attributes: Mapping[str, Any],
        parent: SpanContext | None,
        links: Sequence[Link] | None,
        start_ns: int,
        end_ns: int,
    ) -> None:
        """Record one consumer span from ``start_ns`` to ``end_ns`` (a child of
        ``parent`` when given, else a root with ``links``)."""
        kind = SpanKind.CONSUMER
        if parent is None and self._roots_sampled:
            trace_id = self._ids.generate_trace_id()
            flags, trace_state = _SAMPLED, None
        else:
            if parent is None:
                trace_id = self._ids.generate_trace_id()
                context = _ROOT
            else:
                trace_id = parent.trace_id
                context = trace.set_span_in_context(NonRecordingSpan(parent))
            result = self._sampler.should_sample(context, trace_id, name, kind, attributes, links)
            if not result.decision.is_recording():
                return
            flags = _SAMPLED if result.decision.is_sampled() else _NOT_SAMPLED
            trace_state = result.trace_state
            if result.attributes:
                attributes = {**attributes, **result.attributes}
        span_context = SpanContext(
            trace_id,
            self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=flags,
            trace_state=trace_state,
        )
        self._processor.on_end(
            ReadableSpan(
                name=name,
                context=span_context,
                parent=parent,
                resource=self._resource,
                attributes=attributes,
                links=links or (),
                kind=kind,
                start_time=start_ns,
                end_time=end_ns,
                instrumentation_scope=self._scope,
            )
        )


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
