"""Live per-queue overrides: the rows operators write and workers read.

Values arrive here already validated and in their stored (JSON) form (see
:mod:`awa_django.domain.overrides`); this module only moves them in and out of
``awa.queue_overrides``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .base import Execute, Steps, atomic_operation, operation


def _named(name: str, params: Mapping[str, Any]) -> Execute:
    return Execute.named("overrides", name, params)


@operation
def read(queues: Sequence[str] | None = None) -> Steps[dict[str, dict[str, Any]]]:
    """``queue -> {key: value}`` of every override (or those of ``queues``)."""
    rows = yield _named("read_overrides", {"queues": None if queues is None else list(queues)})
    found: dict[str, dict[str, Any]] = {}
    for queue, key, value, _updated_at in rows:
        found.setdefault(queue, {})[key] = json.loads(value)
    return found


@atomic_operation
def set_values(queue: str, values: Mapping[str, Any]) -> Steps[dict[str, Any]]:
    """Upsert ``values`` (key -> JSON-able value) for ``queue``; returns its overrides now."""
    keys = list(values)
    yield _named(
        "set_overrides",
        {"queue": queue, "keys": keys, "values": [json.dumps(values[k]) for k in keys]},
    )
    current = yield from read([queue]).steps
    return current.get(queue, {})


@operation
def clear(queue: str, keys: Sequence[str] | None = None) -> Steps[list[str]]:
    """Delete ``keys`` of ``queue`` (every key when None); returns the keys deleted."""
    rows = yield _named(
        "clear_overrides", {"queue": queue, "keys": None if keys is None else list(keys)}
    )
    return sorted(key for (key,) in rows)
