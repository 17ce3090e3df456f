"""An attempt's ``process`` span: built lazily, made ambient cheaply.

:class:`LazySpan` stands in for the SDK span until someone looks at it (see
its docstring for why), :class:`AttemptScope` makes it the ambient context
while the handler runs -- setting OpenTelemetry's context variable directly
when the API's default runtime context is in use -- and the W3C
``traceparent`` helpers link an attempt to its producer.  The observer
(:class:`~.otel.OtelObserver`) builds the real span; this module sees it
only through :class:`SpanSource`, so it does not import the observer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.propagation import _SPAN_KEY

from ..domain.records import ClaimedJob

log = logging.getLogger("awa_django.observability.otel")

ROOT = otel_context.Context()  # an empty context: a span started in it is a root


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
    made = trace.set_span_in_context(probe, ROOT)
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


class SpanSource(Protocol):
    """What a :class:`LazySpan` needs of the observer that made it."""

    _open: dict[tuple[int, int], LazySpan]

    def _start_process(self, job: ClaimedJob, start_ns: int, outcome: str | None) -> Span: ...


class LazySpan(Span):
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

    def __init__(self, observer: SpanSource, job: ClaimedJob) -> None:
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


class AttemptScope:
    """Makes the attempt's (lazy) span the ambient context while the handler runs."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: LazySpan) -> None:
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


def end_parked(lazy: LazySpan, end_ns: int) -> None:
    lazy.real("waiting_external").end(end_ns)
