"""The lifecycle hooks every observer (logs, signals, telemetry) builds on.

The producer (``enqueue``/``enqueue_many``) and the worker runtime call
the methods of :data:`observers` at each step of a job's life; an
:class:`Observer` overrides the ones it cares about.  The hub answers the
two questions the hot path asks before paying for anything:

* ``observers.active`` -- is any observer registered at all?  With none,
  every call site is one attribute test.
* ``observers.scoped`` -- does any observer wrap work in a scope (a span,
  a signal sent in the handler's thread)?  Without one, no context manager
  is built per job.

Hooks run on the thread that did the work: ``enqueue_scope``/``enqueued`` in
the producer's thread, ``attempt_scope`` in the handler's thread (sync
handlers) or task (async ones), the others on the worker's event loop --
so they must not block.  An observer that fails is logged and skipped:
telemetry never fails a job.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..domain.records import ClaimedJob, Closure, PreparedJob

log = logging.getLogger("awa_django.observability")


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One queue's depth and lag as the leader measured it.

    ``lag`` is the age in seconds of the oldest available job (0 when none
    waits); counts are the exact counters, not a scan.
    """

    queue: str
    available: int
    scheduled: int
    running: int
    lag: float
    paused: bool = False


class Observer:
    """Base class: every hook is a no-op; override what you observe.

    ``scoped`` says the observer returns scopes from :meth:`enqueue_scope` /
    :meth:`attempt_scope`; leave it False otherwise, so that the hub skips
    building scopes for every job.
    """

    scoped = False

    # -- producer side -----------------------------------------------------

    def enqueue_scope(self, queue: str, count: int) -> AbstractContextManager[Any] | None:
        """A scope around writing ``count`` jobs of ``queue`` (a ``send`` span)."""
        return None

    def traceparent(self) -> str | None:
        """The W3C ``traceparent`` of the ambient context, stored in a new job's
        metadata (``awa:traceparent``) so that its execution continues the trace."""
        return None

    def enqueued(self, jobs: Sequence[PreparedJob], ids: Sequence[int | None]) -> None:
        """``jobs`` were written (in the caller's transaction); ``ids`` in order,
        None for a unique job that was skipped."""

    # -- worker side -------------------------------------------------------

    def claimed(self, queue: str, wanted: int, claimed: int, seconds: float) -> None:
        """One claim statement on ``queue`` asked for ``wanted`` and got ``claimed``."""

    def attempt_scope(self, job: ClaimedJob) -> AbstractContextManager[Any] | None:
        """A scope the handler runs in (its thread for a sync handler)."""
        return None

    def closed(self, job: ClaimedJob, closure: Closure, applied: bool, seconds: float) -> None:
        """The attempt's closure is durable (``applied``) or was rejected as
        stale; ``seconds`` from the start of the handler to durability."""

    def closed_many(
        self, closes: Sequence[tuple[ClaimedJob, Closure, bool]], seconds: float
    ) -> None:
        """Attempts whose closures were written together (the jobs of one
        claim that finished at once), each ``(job, closure, applied)``: by
        default each goes to :meth:`closed`.  An observer overrides this to
        pay its fixed costs (a lock, a level check, a clock read) once per
        group rather than once per job."""
        for job, closure, applied in closes:
            self.closed(job, closure, applied, seconds)

    def parked(self, job: ClaimedJob) -> None:
        """The attempt is waiting for an external callback (nothing closed yet)."""

    def maintained(self, task: str, result: object, seconds: float) -> None:
        """A maintenance task's tick finished with ``result`` (its ``run_once``)."""

    def rescued(self, reason: str, count: int) -> None:
        """The leader closed ``count`` abandoned attempts (``stale_heartbeat``,
        ``deadline_expired`` or ``callback_timeout``)."""

    def queues_sampled(self, samples: Sequence[QueueSample]) -> None:
        """The leader measured every queue's depth and lag (every few seconds)."""

    def outbox_sampled(self, pending: int, lag: float) -> None:
        """Outbox mode: the relay measured what waits in the outbox (once a
        second, on the relay's thread)."""

    def runtime(self, state: str) -> None:
        """This worker process changed state: ``started``, ``leader``,
        ``follower``, ``stopping``, ``stopped``."""

    def flush(self, timeout: float) -> None:
        """Deliver or export what is buffered (the worker calls it on exit)."""


class Observers:
    """The registry the hot path reports to (one per process: :data:`observers`)."""

    def __init__(self) -> None:
        self._all: tuple[Observer, ...] = ()
        self._may_scope: tuple[Observer, ...] = ()
        self._hooks: dict[str, tuple[Callable[..., Any], ...]] = {}
        self._lock = threading.Lock()
        self._refresh()

    def __iter__(self) -> Iterator[Observer]:
        return iter(self._all)

    def add(self, observer: Observer) -> Observer:
        """Register ``observer`` (once); returns it."""
        with self._lock:
            if observer not in self._all:
                self._all = (*self._all, observer)
            self._refresh()
        return observer

    def remove(self, observer: Observer) -> None:
        with self._lock:
            self._all = tuple(o for o in self._all if o is not observer)
            self._refresh()

    def of_type(self, kind: type[Observer]) -> Observer | None:
        """The registered observer of class ``kind``, if any."""
        return next((o for o in self._all if type(o) is kind), None)

    def _refresh(self) -> None:
        self.active = bool(self._all)

        # Per hook, the bound methods of the observers that override it: a
        # hook nobody overrides costs an empty loop.
        def overrides(observer: Observer, name: str) -> bool:
            return getattr(type(observer), name) is not getattr(Observer, name)

        self._hooks = {
            name: tuple(
                getattr(o, name)
                for o in self._all
                # An observer of single closes sees grouped ones through the
                # default closed_many.
                if overrides(o, name) or (name == "closed_many" and overrides(o, "closed"))
            )
            for name, default in vars(Observer).items()
            if callable(default) and not name.startswith("_")
        }
        # ``scoped`` may be a property (a signal scope exists only while
        # it has a receiver); an observer whose class says False never scopes.
        self._may_scope = tuple(o for o in self._all if type(o).scoped is not False)
        # (observer, its bound attempt_scope): looked up once, not per attempt.
        self._attempt_scopers = tuple((o, o.attempt_scope) for o in self._may_scope)

    @property
    def scoped(self) -> bool:
        """Whether any observer would wrap an enqueue or an attempt right now."""
        return any(o.scoped for o in self._may_scope)

    # -- dispatch ------------------------------------------------------------

    def _each(self, method: str, *args: Any) -> None:
        for hook in self._hooks[method]:
            try:
                hook(*args)
            except Exception:
                log.exception("observer hook %r failed", hook)

    def _scope(self, method: str, *args: Any) -> AbstractContextManager[Any] | None:
        """The scopes of the observers scoping now, entered together; None
        when none does.  One pass, no list: this runs once per attempt."""
        first: Observer | None = None
        several = False
        for observer in self._may_scope:
            if observer.scoped:
                if first is None:
                    first = observer
                else:
                    several = True
                    break
        if first is None:
            return None
        if not several:
            # The common case (one tracer): its scope as it is, no stack around it.
            try:
                scope: AbstractContextManager[Any] | None = getattr(first, method)(*args)
            except Exception:
                log.exception("observer %r failed in %s", first, method)
                return None
            return scope
        scoping = [o for o in self._may_scope if o.scoped]
        stack = contextlib.ExitStack()
        for observer in scoping:
            try:
                scope = getattr(observer, method)(*args)
                if scope is not None:
                    stack.enter_context(scope)
            except Exception:
                log.exception("observer %r failed in %s", observer, method)
        return stack

    def enqueue_scope(self, queue: str, count: int) -> AbstractContextManager[Any]:
        """Every observer's scope around an enqueue, entered together."""
        scope = self._scope("enqueue_scope", queue, count)
        return contextlib.nullcontext() if scope is None else scope

    def attempt_scope(self, job: ClaimedJob) -> AbstractContextManager[Any]:
        """Every observer's scope around a handler, entered together."""
        scope = self._scope("attempt_scope", job)
        return contextlib.nullcontext() if scope is None else scope

    def attempt_scope_or_none(self, job: ClaimedJob) -> AbstractContextManager[Any] | None:
        """:meth:`attempt_scope`, or None when no observer scopes: what the
        executor asks once per attempt, so that it builds no ``with`` then.
        The common case -- one observer scoping now -- is spelled out (this
        runs for every job); several go through :meth:`_scope`."""
        found = None
        for observer, attempt_scope in self._attempt_scopers:
            if observer.scoped:
                if found is not None:
                    return self._scope("attempt_scope", job)
                found = attempt_scope
        if found is None:
            return None
        try:
            scope: AbstractContextManager[Any] | None = found(job)
        except Exception:
            log.exception("observer hook %r failed", found)
            return None
        return scope

    def traceparent(self) -> str | None:
        for hook in self._hooks["traceparent"]:
            try:
                value = hook()
            except Exception:
                log.exception("observer hook %r failed", hook)
                continue
            if value:
                return str(value)
        return None

    def enqueued(self, jobs: Sequence[PreparedJob], ids: Sequence[int | None]) -> None:
        self._each("enqueued", jobs, ids)

    def claimed(self, queue: str, wanted: int, claimed: int, seconds: float) -> None:
        self._each("claimed", queue, wanted, claimed, seconds)

    def closed(self, job: ClaimedJob, closure: Closure, applied: bool, seconds: float) -> None:
        self._each("closed", job, closure, applied, seconds)

    def closed_many(
        self, closes: Sequence[tuple[ClaimedJob, Closure, bool]], seconds: float
    ) -> None:
        self._each("closed_many", closes, seconds)

    def parked(self, job: ClaimedJob) -> None:
        self._each("parked", job)

    def maintained(self, task: str, result: object, seconds: float) -> None:
        self._each("maintained", task, result, seconds)

    def rescued(self, reason: str, count: int) -> None:
        self._each("rescued", reason, count)

    def queues_sampled(self, samples: Sequence[QueueSample]) -> None:
        self._each("queues_sampled", samples)

    def outbox_sampled(self, pending: int, lag: float) -> None:
        self._each("outbox_sampled", pending, lag)

    def runtime(self, state: str) -> None:
        self._each("runtime", state)

    def flush(self, timeout: float = 5.0) -> None:
        self._each("flush", timeout)


#: The process's observers.  The runtime and the producer report here.
observers = Observers()
