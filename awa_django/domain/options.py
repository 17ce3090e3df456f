"""Per-job options: how one job is enqueued, declared once.

:class:`JobOptions` is the single record of every option a call of a job
may carry (``queue``, ``priority``, ``run_at``/``run_in``, ``unique``,
``ordering_key``, ``tags``, ``metadata``, ``database``, the concurrency key
and limit, dependencies).  It is frozen and validated in ``__post_init__``,
so an instance that exists is valid and a bad option raises ``InvalidJob``
where it is given; ``using(**changes)`` is :func:`dataclasses.replace`, which
runs that validation again on the copy.  ``@job`` builds one from its
declaration; ``Job.using(...)`` derives per-call copies; ``prepare`` only
has the call's arguments left to check (the hot path of bulk enqueue), which
is why the serialised forms (``metadata_json``, ``stored_ordering_key``) are
computed here, once per instance.

The options a worker must see again travel in the job's metadata, under the
``awa:`` keys of :mod:`awa_django.concurrency`, :mod:`awa_django.dependencies`
and :data:`awa_django.payload.TRACEPARENT_KEY`.
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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from ..concurrency import CONCURRENCY_KEY, CONCURRENCY_LIMIT, check_key, check_limit
from ..dependencies import DEPENDS_ON, ON_FAILURE, check_depends_on, check_policy
from ..exceptions import InvalidJob
from ..payload import (
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
from ..unique import Unique


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


def _set(options: JobOptions, name: str, value: object) -> None:
    # The one way to normalise a field of a frozen instance (in __post_init__).
    object.__setattr__(options, name, value)


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
    #: ``ordering_key`` as stored (a bytes key as ``x`` + hex).
    stored_ordering_key: str | None = field(init=False, repr=False, compare=False)
    #: ``metadata`` as JSON text (``"{}"`` for none).
    metadata_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The order of the checks is the order of the errors a call with
        # several bad options has always raised.
        if self.run_in is not None:
            _set(self, "run_in", seconds(self.run_in, "run_in"))
        if self.unique is not None and not isinstance(self.unique, Unique):
            raise InvalidJob(f"unique must be a Unique(...), got {self.unique!r}")
        if self.run_at is not None and self.run_in is not None:
            raise InvalidJob("pass run_at or run_in, not both")
        _set(self, "queue", check_queue(self.queue))
        _set(self, "priority", check_priority(self.priority))
        _set(self, "max_attempts", check_max_attempts(self.max_attempts))
        _set(self, "run_at", check_run_at(self.run_at))
        _set(self, "stored_ordering_key", check_ordering_key(self.ordering_key))
        _set(self, "tags", tuple(check_tags(self.tags)))
        _set(self, "metadata_json", check_metadata(self.metadata))
        if self.concurrency_key is not None:
            _set(self, "concurrency_key", check_key(self.concurrency_key))
        _set(self, "concurrency_limit", check_limit(self.concurrency_limit))
        _set(self, "depends_on", check_depends_on(self.depends_on))
        _set(self, "on_dependency_failure", check_policy(self.on_dependency_failure))
        if self.depends_on is not None and self.unique is not None:
            raise InvalidJob("a job cannot be both unique and depend on other jobs")

    def using(self, **changes: Unpack[CallOptions]) -> JobOptions:
        """A copy with ``changes`` replacing these options, validated."""
        unknown = changes.keys() - CallOptions.__optional_keys__
        if unknown:
            raise TypeError(f"using() got unexpected keyword arguments: {sorted(unknown)}")
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

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
