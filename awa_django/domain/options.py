"""Per-job options: how one job is enqueued, declared once.

:class:`JobOptions` is the single record of every option a call of a job
may carry (``queue``, ``priority``, ``run_at``/``run_in``, ``unique``,
``ordering_key``, ``tags``, ``metadata``, ``database``, the concurrency key
and limit, dependencies, ``encrypt``).  It is frozen and validated in ``__post_init__``,
so an instance that exists is valid and a bad option raises ``InvalidJob``
where it is given; ``using(**changes)`` is :func:`dataclasses.replace` with the
changed fields validated on the copy.  ``@job`` builds one from its
declaration; ``Job.using(...)`` derives per-call copies; ``prepare`` only
has the call's arguments left to check (the hot path of bulk enqueue), which
is why the serialised forms (``metadata_json``, ``stored_ordering_key``) are
computed here, once per instance.

The options a worker must see again travel in the job's metadata, under the
``awa:`` keys of :mod:`awa_django.domain.concurrency`, :mod:`awa_django.domain.dependencies`
and :data:`awa_django.domain.payload.TRACEPARENT_KEY`.
:meth:`JobOptions.stored_metadata` writes them (one JSON round trip, only
when there is something to add) and :class:`StoredOptions` reads them back;
nothing else builds or parses those keys.

:class:`CallOptions` is the same set of names as a ``TypedDict``, what type
checkers see for ``using(**options)``; ``tests`` keep the two in step.

This module runs no SQL and imports neither the ORM nor asyncio.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from ..exceptions import InvalidJob
from .concurrency import CONCURRENCY_KEY, CONCURRENCY_LIMIT, check_key, check_limit
from .dependencies import DEPENDS_ON, ON_FAILURE, check_depends_on, check_policy
from .payload import (
    TRACEPARENT_KEY,
    check_max_attempts,
    check_metadata,
    check_ordering_key,
    check_priority,
    check_queue,
    check_run_at,
    check_tags,
    seconds,
    to_json,
)
from .unique import Unique


class CallOptions(TypedDict, total=False):
    """The per-call options ``using(...)`` accepts (each replaces the current one)."""

    queue: str
    priority: int
    run_at: dt.datetime | None
    run_in: float | dt.timedelta | None
    max_attempts: int
    unique: Unique | None
    ordering_key: str | bytes | None
    tags: Iterable[str] | None
    metadata: Mapping[str, Any] | None
    database: str | None
    concurrency_key: str | None
    concurrency_limit: int | None
    depends_on: Iterable[object] | None
    on_dependency_failure: str
    encrypt: bool


@dataclass(frozen=True)
class JobOptions:
    """Every option of one job call, validated (see the module docstring).

    Fields hold the normalised value (``run_in`` in seconds, ``tags`` and
    ``depends_on`` as tuples); ``ordering_key`` and ``metadata`` keep what
    was given, their stored forms are ``stored_ordering_key`` and
    ``metadata_json``.  ``concurrency_key``/``concurrency_limit`` left None
    fall back, at ``prepare``, to the job's own declaration.
    """

    queue: str
    priority: int
    max_attempts: int
    run_at: dt.datetime | None = None
    run_in: float | None = None
    unique: Unique | None = None
    ordering_key: str | bytes | None = None
    tags: tuple[str, ...] = ()
    metadata: Mapping[str, Any] | None = None
    database: str | None = None
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    depends_on: tuple[int, ...] | None = None
    on_dependency_failure: str = "cancel"
    #: Seal this call's arguments (as ``@job(encrypt=True)`` or the queue's
    #: ``encrypt`` option would; False leaves it to those).
    encrypt: bool = False
    #: ``ordering_key`` as stored (a bytes key as ``x`` + hex).
    stored_ordering_key: str | None = field(init=False, repr=False, compare=False)
    #: ``metadata`` as JSON text (``"{}"`` for none).
    metadata_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._validate(_SETTABLE)

    def using(self, **changes: Unpack[CallOptions]) -> JobOptions:
        """A copy with ``changes`` replacing these options, validated.

        This is ``dataclasses.replace(self, **changes)`` (the tests hold
        them equal), written out so that only what changed is checked
        again: ``using`` runs once per job on the bulk-enqueue path.
        """
        unknown = changes.keys() - _SETTABLE
        if unknown:
            raise TypeError(f"using() got unexpected keyword arguments: {sorted(unknown)}")
        copy = object.__new__(JobOptions)
        copy.__dict__.update(self.__dict__)
        for name, value in changes.items():
            object.__setattr__(copy, name, value)
        copy._validate(changes.keys())
        return copy

    def _validate(self, changed: Collection[str]) -> None:
        """Check (and normalise) the fields named in ``changed``; the rules
        across fields always.  The order of the checks is the order of the
        errors a call with several bad options has always raised."""
        normalise = object.__setattr__  # the way to set a field of a frozen instance
        if "run_in" in changed and self.run_in is not None:
            normalise(self, "run_in", seconds(self.run_in, "run_in"))
        if "unique" in changed and self.unique is not None and not isinstance(self.unique, Unique):
            raise InvalidJob(f"unique must be a Unique(...), got {self.unique!r}")
        if self.run_at is not None and self.run_in is not None:
            raise InvalidJob("pass run_at or run_in, not both")
        if "queue" in changed:
            check_queue(self.queue)
        if "priority" in changed:
            check_priority(self.priority)
        if "max_attempts" in changed:
            check_max_attempts(self.max_attempts)
        if "run_at" in changed:
            check_run_at(self.run_at)
        if "ordering_key" in changed:
            normalise(self, "stored_ordering_key", check_ordering_key(self.ordering_key))
        if "tags" in changed:
            normalise(self, "tags", tuple(check_tags(self.tags)))
        # The caller's dict is read again on every copy, as it always was.
        if "metadata" in changed or self.metadata is not None:
            normalise(self, "metadata_json", check_metadata(self.metadata))
        if "concurrency_key" in changed and self.concurrency_key is not None:
            check_key(self.concurrency_key)
        if "concurrency_limit" in changed:
            check_limit(self.concurrency_limit)
        if "depends_on" in changed:
            normalise(self, "depends_on", check_depends_on(self.depends_on))
        if "on_dependency_failure" in changed:
            check_policy(self.on_dependency_failure)
        if "encrypt" in changed and not isinstance(self.encrypt, bool):
            raise InvalidJob(f"encrypt must be True or False, got {self.encrypt!r}")
        if self.depends_on is not None and self.unique is not None:
            raise InvalidJob("a job cannot be both unique and depend on other jobs")

    def stored_metadata(
        self,
        concurrency_key: str | None = None,
        concurrency_limit: int = 1,
        traceparent: str | None = None,
    ) -> str:
        """The metadata JSON a job with these options is stored with.

        The caller's ``metadata``, plus the concurrency key and limit of the
        call (resolved by the caller: a job may compute its key from the
        call's arguments), the dependencies and the enqueue's
        ``traceparent``.  An explicit ``metadata["awa:traceparent"]`` wins
        (a producer outside any span joins a trace that way); the other
        ``awa:`` keys replace whatever ``metadata`` held under them.
        """
        if concurrency_key is None and self.depends_on is None and not traceparent:
            return self.metadata_json
        metadata = {} if self.metadata_json == "{}" else json.loads(self.metadata_json)
        if concurrency_key is not None:
            metadata[CONCURRENCY_KEY] = concurrency_key
            metadata[CONCURRENCY_LIMIT] = concurrency_limit
        if self.depends_on is not None:
            metadata[DEPENDS_ON] = list(self.depends_on)
            metadata[ON_FAILURE] = self.on_dependency_failure
        if traceparent:
            metadata.setdefault(TRACEPARENT_KEY, traceparent)
        return to_json(metadata, "metadata")


#: The fields ``using`` may change: every field but the stored forms.
_SETTABLE = frozenset(f.name for f in dataclasses.fields(JobOptions) if f.init)


@dataclass(frozen=True)
class StoredOptions:
    """The options a stored job's metadata carries, read back
    (:meth:`JobOptions.stored_metadata` wrote them)."""

    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    depends_on: tuple[int, ...] = ()
    on_dependency_failure: str | None = None
    traceparent: str | None = None

    @classmethod
    def read(cls, metadata: Mapping[str, Any]) -> StoredOptions:
        """What ``metadata`` holds under the ``awa:`` option keys (a key
        holding a value of the wrong type reads as absent)."""
        key = metadata.get(CONCURRENCY_KEY)
        limit = metadata.get(CONCURRENCY_LIMIT)
        ids = metadata.get(DEPENDS_ON)
        policy = metadata.get(ON_FAILURE)
        traceparent = metadata.get(TRACEPARENT_KEY)
        return cls(
            concurrency_key=key if isinstance(key, str) else None,
            concurrency_limit=limit if isinstance(limit, int) else None,
            depends_on=tuple(ids) if isinstance(ids, list) else (),
            on_dependency_failure=policy if isinstance(policy, str) else None,
            traceparent=traceparent if isinstance(traceparent, str) else None,
        )
