"""Per-key concurrency: how a job names its key and limit.

``@job(concurrency_key=..., concurrency_limit=N)`` or
``.using(concurrency_key="customer-42")`` stores the key and the limit in
the job's metadata under :data:`CONCURRENCY_KEY` and
:data:`CONCURRENCY_LIMIT`.  The claim reads them there, in PostgreSQL
(``sql/schema/concurrency.sql``): a job is handed to a worker only with one of its
key's ``limit`` slots, so at most that many attempts of a key run at once
across every worker, queue and host.  Nothing else in the runtime needs to
know: a slot is free again as soon as the attempt holding it is closed, by
whatever path closes it.

This module validates; :meth:`awa_django.domain.options.JobOptions.stored_metadata`
writes the keys into a job's metadata.  It runs no SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..exceptions import InvalidJob
from .payload import storable

#: Metadata key holding a job's concurrency key (a string).
CONCURRENCY_KEY = "awa:concurrency_key"
#: Metadata key holding the most attempts of that key that may run at once.
CONCURRENCY_LIMIT = "awa:concurrency_limit"

#: Bounds the SQL side applies too (``awa.concurrency_limit``).
MAX_LIMIT = 10_000
MAX_KEY_LENGTH = 255

KeySource = str | Callable[..., str | None]


def check_key(key: object) -> str:
    """A valid concurrency key (a non-empty string of at most 255 characters)."""
    if not isinstance(key, str) or not key:
        raise InvalidJob(f"concurrency_key must be a non-empty string, got {key!r}")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidJob(f"concurrency_key is longer than {MAX_KEY_LENGTH} characters")
    if not storable(key):
        raise InvalidJob("concurrency_key must not contain NUL characters or lone surrogates")
    return key


def check_key_source(source: object) -> KeySource | None:
    """``@job(concurrency_key=...)``: None, a fixed key, or a callable of the call's arguments."""
    if source is None or callable(source):
        return source
    return check_key(source)


def check_limit(limit: object) -> int | None:
    """A valid ``concurrency_limit`` (1 to 10000), or None for "not given"."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidJob(
            f"concurrency_limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}"
        )
    return limit


def resolve_key(
    source: KeySource | None, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> str | None:
    """The key of one call: a fixed key, or what the callable returns for the
    call's arguments (None: this call has no key)."""
    if source is None or isinstance(source, str):
        return source
    key = source(*args, **kwargs)
    return None if key is None else check_key(key)


def key_of(metadata: Mapping[str, Any]) -> str | None:
    """The concurrency key a claimed job's metadata names, if any."""
    key = metadata.get(CONCURRENCY_KEY)
    return key if isinstance(key, str) else None
