"""``@job``: job definitions, the registry of kinds, and the enqueue front door.

A job is a module-level function wrapped in :class:`Job`.  Calling the
wrapper still runs the function inline; ``.enqueue()`` validates the call
and writes it through Django's connection for ``AWA["DATABASE"]`` (or the
alias given to ``.using(database=...)``), so it commits or rolls back with
the caller's ``transaction.atomic()`` block.

Validation happens before any SQL runs: a call's options are one frozen
:class:`~awa_django.domain.options.JobOptions`, validated where they are
given, and :meth:`JobCall.prepare` checks the call's arguments; the storage
layer only ever sees a :class:`PreparedJob`.

For type checkers ``Job[P, R]`` keeps the handler's parameters ``P`` (less
the leading ``JobContext`` of a ``takes_context=True`` handler) and return
type ``R``, so ``send_email.enqueue(...)`` is checked like a call of
``send_email``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import importlib
import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import (
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    TypedDict,
    TypeVar,
    Unpack,
    overload,
)

from .conf import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, awa_settings
from .context import JobContext
from .domain import clock, concurrency
from .domain.descriptors import Descriptor, first_line
from .domain.options import CallOptions, JobOptions
from .domain.payload import check_kind, check_metadata_size, encode_arguments, seal_arguments
from .domain.records import EnqueuedJob, PreparedJob
from .domain.unique import Unique as Unique  # documented as awa_django.jobs.Unique
from .exceptions import InvalidJob
from .observability.hooks import observers

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger("awa_django.worker")


#: Metadata key naming the module that defines a job's kind, for kinds no
#: ``jobs`` module registers (Django tasks, see ``awa_django.tasks``): a
#: process that does not know the kind imports that module when it first
#: meets such a job (:meth:`_Registry.find`).
DEFINED_IN = "awa.defined_in"


class _Registry:
    """Job kinds known to this process, filled by ``@job`` at import time."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job[..., Any]] = {}

    def add(self, job: Job[..., Any]) -> None:
        existing = self._jobs.get(job.kind)
        if existing is not None and existing.qualname != job.qualname:
            raise InvalidJob(
                f"job kind {job.kind!r} is already registered by {existing.qualname}; "
                f"pass kind=... to @job on {job.qualname}"
            )
        self._jobs[job.kind] = job

    def get(self, kind: str) -> Job[..., Any] | None:
        return self._jobs.get(kind)

    def find(self, kind: str, metadata: Mapping[str, Any]) -> Job[..., Any] | None:
        """The job that runs a claimed ``kind``.  A kind not registered yet is
        looked for once more after importing the module its job's metadata
        names under :data:`DEFINED_IN` (importing it registers the kind)."""
        found = self._jobs.get(kind)
        if found is not None:
            return found
        module = metadata.get(DEFINED_IN)
        if not isinstance(module, str) or not module:
            return None
        try:
            importlib.import_module(module)
        except Exception:
            log.exception("job kind %s: could not import %s", kind, module)
            return None
        return self._jobs.get(kind)

    def __contains__(self, kind: object) -> bool:
        return kind in self._jobs

    def __iter__(self) -> Iterator[Job[..., Any]]:
        return iter(list(self._jobs.values()))

    def kinds(self) -> list[str]:
        return sorted(self._jobs)


registry = _Registry()


class JobCall(Generic[P, R]):
    """A job with per-call options bound by ``.using(...)``.

    The options are a :class:`~awa_django.domain.options.JobOptions`,
    validated when given, so ``prepare``/``enqueue`` only have the call's
    arguments left to check (the hot path of bulk enqueue).
    """

    __slots__ = ("job", "options")

    def __init__(self, job: Job[P, R], options: JobOptions) -> None:
        self.job = job
        self.options = options

    def using(self, **options: Unpack[CallOptions]) -> JobCall[P, R]:
        """Return a copy with these options replaced (validated now)."""
        return JobCall(self.job, self.options.using(**options))

    def prepare(self, /, *args: P.args, **kwargs: P.kwargs) -> PreparedJob:
        """Validate and serialise one call; nothing is written."""
        options, job = self.options, self.job
        run_at = options.run_at
        if options.run_in is not None:
            run_at = clock.now() + dt.timedelta(seconds=options.run_in)
        job.check_arguments(args, kwargs)
        settings = awa_settings()
        limit = settings.max_payload_bytes
        args_json, kwargs_json = encode_arguments(args, kwargs, limit)
        unique = self._unique_claim(args_json, kwargs_json)
        if options.encrypt or job.encrypt or settings.encrypts(options.queue):
            args_json, kwargs_json = seal_arguments(args_json, kwargs_json, limit, options.unique)
        key = options.concurrency_key or concurrency.resolve_key(job.concurrency_key, args, kwargs)
        metadata_json = options.stored_metadata(
            key,
            options.concurrency_limit or job.concurrency_limit or 1,
            observers.traceparent() if observers.active else None,
        )
        check_metadata_size(metadata_json, limit)
        return PreparedJob(
            job.kind,
            options.queue,
            options.priority,
            options.max_attempts,
            args_json,
            kwargs_json,
            metadata_json,
            options.tags,
            run_at,
            options.stored_ordering_key,
            options.database,
            *unique,
            depends_on=options.depends_on,
            on_dependency_failure=options.on_dependency_failure,
        )

    def _unique_claim(
        self, args_json: str, kwargs_json: str
    ) -> tuple[str | None, tuple[str, ...] | None]:
        unique = self.options.unique
        if unique is None:
            return None, None
        key = unique.key(self.job.kind, self.options.queue, args_json, kwargs_json)
        return key, unique.states

    def enqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Validate and write the job in the caller's transaction."""
        if not observers.active:
            return _write(self.prepare(*args, **kwargs))
        # Prepared inside the scope, so a job's traceparent is its send span's.
        with observers.enqueue_scope(self.options.queue, 1):
            prepared = self.prepare(*args, **kwargs)
            ref = _write(prepared)
        observers.enqueued([prepared], [ref.id])
        return ref

    async def aenqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Async twin of :meth:`enqueue` (runs it in Django's sync thread)."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.enqueue)(*args, **kwargs)


def _write(prepared: PreparedJob) -> EnqueuedJob:
    """Write one prepared job: to the outbox in outbox mode, else to its database."""
    from .storage import enqueue as storage_enqueue
    from .storage.base import run

    if awa_settings().outbox_database is not None:
        from . import outbox

        alias = outbox.outbox_alias([prepared])
        if alias is not None:
            return outbox.write_one(prepared, alias)
    ref: EnqueuedJob = run(storage_enqueue.enqueue_one(prepared), prepared.database)
    return ref


class Job(Generic[P, R]):
    """A registered job kind wrapping its handler function.

    ``P`` and ``R`` are the parameters and return type of a call (without
    the context argument of a ``takes_context=True`` handler, see
    :class:`ContextJob`).
    """

    def __init__(
        self,
        func: Callable[..., R],
        *,
        kind: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = DEFAULT_PRIORITY,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        takes_context: bool = False,
        descriptor: Descriptor | None = None,
        atomic: bool = False,
        concurrency_key: concurrency.KeySource | None = None,
        concurrency_limit: int | None = None,
        encrypt: bool = False,
    ) -> None:
        if not callable(func):
            raise InvalidJob(f"@job needs a function, got {func!r}")
        if descriptor is not None and not isinstance(descriptor, Descriptor):
            raise InvalidJob(f"descriptor must be an awa_django.Descriptor, got {descriptor!r}")
        self.func = func
        self.qualname = f"{func.__module__}.{func.__qualname__}"
        self.kind = check_kind(kind if kind is not None else f"{func.__module__}.{func.__name__}")
        #: The options of a call that gives none (``using`` derives from them).
        self.defaults = JobOptions(queue=queue, priority=priority, max_attempts=max_attempts)
        self.queue = self.defaults.queue
        self.priority = self.defaults.priority
        self.max_attempts = self.defaults.max_attempts
        self.takes_context = bool(takes_context)
        if descriptor is None:
            descriptor = Descriptor(description=first_line(func.__doc__))
        elif descriptor.description is None and func.__doc__:
            descriptor = dataclasses.replace(descriptor, description=first_line(func.__doc__))
        self.descriptor = descriptor
        self.is_async = inspect.iscoroutinefunction(func)
        if atomic and self.is_async:
            raise TypeError(
                f"@job(atomic=True) needs a plain function; {self.qualname} is async def "
                "(an atomic handler runs in one transaction on its thread's Django connection)"
            )
        #: Run each attempt and its completion in one transaction (see ``@job``).
        self.atomic = bool(atomic)
        #: Per-key concurrency (see ``@job``): a key, or a callable of the call's arguments.
        self.concurrency_key = concurrency.check_key_source(concurrency_key)
        self.concurrency_limit = concurrency.check_limit(concurrency_limit)
        #: Seal the arguments and what attempts write back (see ``@job``).
        self.encrypt = bool(encrypt)
        self.signature = inspect.signature(func)
        self._fitting_shapes: set[tuple[int, frozenset[str]]] = set()
        self._default_call: JobCall[P, R] = JobCall(self, self.defaults)
        if self.takes_context and not self.signature.parameters:
            raise InvalidJob(f"{self.qualname} has takes_context=True but accepts no arguments")
        functools.update_wrapper(self, func)

    def __call__(self, /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the handler inline (no queue involved)."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Job {self.kind} queue={self.queue!r}>"

    def dlq_for(self, metadata: Mapping[str, Any], queue_dlq: bool) -> bool:
        """Whether a job of this kind with this ``metadata`` that fails for
        good moves to the DLQ: the queue's setting ``queue_dlq``, unless the
        kind carries its own policy (Django tasks: the backend's ``dlq``
        option)."""
        return queue_dlq

    def check_arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
        """Reject calls that cannot bind to the handler's signature.

        Whether a call binds depends only on how many positional arguments
        and which keywords it passes, so the answer is cached by that shape.
        """
        shape = (len(args), frozenset(kwargs))
        if shape in self._fitting_shapes:
            return
        try:
            if self.takes_context:
                self.signature.bind(None, *args, **kwargs)
            else:
                self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidJob(f"arguments do not fit {self.qualname}: {exc}") from None
        if len(self._fitting_shapes) < 64:
            self._fitting_shapes.add(shape)

    def using(self, **options: Unpack[CallOptions]) -> JobCall[P, R]:
        """Per-call options: queue, priority, run_at, run_in, max_attempts, ..."""
        return self._default_call.using(**options)

    def prepare(self, /, *args: P.args, **kwargs: P.kwargs) -> PreparedJob:
        """Validate and serialise one call with the job's defaults; nothing is written."""
        return self._default_call.prepare(*args, **kwargs)

    def enqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Validate and write one call in the caller's transaction."""
        return self._default_call.enqueue(*args, **kwargs)

    async def aenqueue(self, /, *args: P.args, **kwargs: P.kwargs) -> EnqueuedJob:
        """Async twin of :meth:`enqueue`."""
        return await self._default_call.aenqueue(*args, **kwargs)


class ContextJob(Job[P, R]):
    """A ``takes_context=True`` job: an inline call passes the ``JobContext`` first."""

    # Only the inline call takes the context (enqueue does not): a
    # deliberate difference from Job.__call__ that type checkers flag.
    def __call__(  # type: ignore[override]
        self, ctx: JobContext, /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """Run the handler inline with ``ctx``."""
        return self.func(ctx, *args, **kwargs)


class JobDeclaration(TypedDict, total=False):
    """The keywords of ``@job(...)`` besides ``takes_context`` (their defaults
    are those of :class:`Job`)."""

    kind: str | None
    queue: str
    priority: int
    max_attempts: int
    descriptor: Descriptor | None
    atomic: bool
    concurrency_key: str | Callable[..., str | None] | None
    concurrency_limit: int | None
    encrypt: bool


# Three overloads because what ``@job`` returns depends on how it is used:
# bare ``@job`` returns the Job itself; ``@job(...)`` returns a decorator,
# whose parameters drop the leading JobContext when ``takes_context`` is the
# literal True (ContextJob), and are unchecked when it is only known at run
# time.  The keywords they share are declared once, in JobDeclaration.
@overload
def job(func: Callable[P, R], /) -> Job[P, R]: ...


@overload
def job(
    func: None = None,
    /,
    *,
    takes_context: Literal[False] = False,
    **declaration: Unpack[JobDeclaration],
) -> Callable[[Callable[P, R]], Job[P, R]]: ...


@overload
def job(
    func: None = None,
    /,
    *,
    takes_context: Literal[True],
    **declaration: Unpack[JobDeclaration],
) -> Callable[[Callable[Concatenate[JobContext, P], R]], ContextJob[P, R]]: ...


@overload
def job(
    func: None = None,
    /,
    *,
    takes_context: bool,
    **declaration: Unpack[JobDeclaration],
) -> Callable[[Callable[..., R]], Job[..., R]]: ...


def job(
    func: Callable[..., Any] | None = None,
    *,
    takes_context: bool = False,
    **declaration: Unpack[JobDeclaration],
) -> Any:
    """Declare a job kind.  Usable as ``@job`` or ``@job(queue=..., ...)``.

    ``descriptor`` labels the kind for operators (the console and
    ``awa_descriptors``); without one, the first line of the handler's
    docstring is its description.

    ``atomic=True`` (plain functions only: an ``async def`` handler raises
    ``TypeError`` here) runs each attempt inside one transaction on the
    handler thread's Django connection for the job's database: the
    handler's ORM writes, the jobs it enqueues there and the attempt's
    completion commit together or not at all.  Any exception (``RetryAfter``,
    ``Snooze``, ``Cancel`` included) rolls the handler's writes back before
    the outcome is recorded, and an attempt that was rescued, cancelled or
    handed back meanwhile rolls back too (see the how-to guide "Atomic handlers").

    ``concurrency_key`` (a string, or a callable given the call's arguments
    that returns the key or None) with ``concurrency_limit=N`` (default 1):
    at most N attempts of one key run at once across the whole fleet;
    ``.using(concurrency_key=..., concurrency_limit=...)`` sets them per call
    (see the concurrency-keys how-to).

    ``encrypt=True`` seals the arguments with ``AWA["ENCRYPTION_KEYS"]``
    before they reach PostgreSQL, and what the attempts write back (return
    value, progress, error messages and tracebacks); only a process holding
    the key opens them (see the encryption how-to).  Unique jobs by
    arguments are refused for such a kind.
    """

    for name in declaration:
        if name not in JobDeclaration.__optional_keys__:
            raise TypeError(f"job() got an unexpected keyword argument {name!r}")

    def register(target: Callable[..., Any]) -> Job[..., Any]:
        wrapped: Job[..., Any] = (ContextJob if takes_context else Job)(
            target, takes_context=takes_context, **declaration
        )
        registry.add(wrapped)
        return wrapped

    if func is not None:
        return register(func)
    return register
