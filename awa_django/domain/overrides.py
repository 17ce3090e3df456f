"""Live per-queue overrides: which options, how they are checked and applied.

An operator overrides some dispatch options of a queue on a running fleet
(``ops.set_queue_override``, ``manage.py awa_queue overrides set``); every
worker running the queue reads the overrides every few seconds
(:data:`~awa_django.runtime.config.OVERRIDE_REFRESH_INTERVAL`) and applies
them on top of its settings.  The settings (and ``awa_worker --queue
NAME:N``) stay the default: a set override wins, clearing it reverts.

Values are checked by the parsers of ``AWA["QUEUES"]`` and stored as JSON:
durations in seconds, ``rate_limit`` as ``[max_rate, burst]`` or ``null``
(no limit).  This module is pure: no database, no runtime; the capacity
report applies the rule of :mod:`.capacity`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..conf import AwaSettings, QueueConfig, RateLimit, parse_queue_value
from ..exceptions import InvalidJob
from . import capacity as rule

#: The queue options a live override may change.
OVERRIDABLE: tuple[str, ...] = (
    "poll_interval",
    "claim_batch_size",
    "max_workers",
    "rate_limit",
    "deadline",
)


def _stored(value: Any) -> Any:
    """A parsed option value as JSON (``RateLimit`` as ``[max_rate, burst]``)."""
    if isinstance(value, RateLimit):
        return [value.max_rate, value.burst]
    return value


def check_overrides(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` checked like the settings and in their stored (JSON) form.

    Raises ``InvalidJob`` naming every unknown key and every bad value at
    once (nothing is returned, so nothing gets written).
    """
    if not values:
        raise InvalidJob(f"give at least one option to override: {', '.join(OVERRIDABLE)}")
    problems: list[str] = []
    checked: dict[str, Any] = {}
    for key, value in values.items():
        try:
            checked[key] = _stored(parse_queue_value(key, value, keys=OVERRIDABLE))
        except InvalidJob as exc:
            problems.append(str(exc))
    if problems:
        raise InvalidJob("invalid queue override: " + "; ".join(problems))
    return checked


def check_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    """``keys`` if every one is overridable; ``InvalidJob`` naming the others."""
    unknown = [key for key in keys if key not in OVERRIDABLE]
    if unknown:
        raise InvalidJob(
            f"not an overridable queue option: {', '.join(map(repr, unknown))}; "
            f"overridable: {', '.join(OVERRIDABLE)}"
        )
    return keys


def apply_overrides(
    queue: QueueConfig, stored: Mapping[str, Any]
) -> tuple[QueueConfig, dict[str, str]]:
    """``queue`` with the stored overrides applied, and the ones that could not be.

    A stored value is parsed again (rows may have been written by another
    version, or by hand): one that does not parse is left out and reported
    as ``key -> problem``, the others still apply.
    """
    changes: dict[str, Any] = {}
    problems: dict[str, str] = {}
    for key, value in stored.items():
        try:
            changes[key] = parse_queue_value(key, value, keys=OVERRIDABLE)
        except InvalidJob as exc:
            problems[key] = str(exc)
    return (dataclasses.replace(queue, **changes) if changes else queue), problems


def capacity(settings: AwaSettings, stored: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The effective capacity of every declared or overridden queue, as JSON.

    What a worker started with these settings and no ``--queue`` flag runs:
    per queue its reserved permits (its ``max_workers``, or in weighted mode
    its ``min_workers``), its cap, weight, claimers, batch, rate limit and
    the live overrides in effect.  In weighted mode ``saturated`` is what
    the queue holds when every declared queue has work (its floor plus its
    weighted share of the overflow).
    """
    limit = settings.global_max_workers
    names = sorted(set(settings.queues) | set(stored))
    effective: dict[str, tuple[QueueConfig, dict[str, str]]] = {
        name: apply_overrides(settings.queue(name), stored.get(name, {})) for name in names
    }
    declared = [name for name in names if name in settings.queues]
    floors = {
        name: rule.floor(queue.min_workers, queue.max_workers)
        for name, (queue, _) in effective.items()
    }
    shares: dict[str, int] = {}
    overflow = None
    if limit is not None:
        held, shares = rule.saturated_shares(
            limit,
            [
                (name, queue.min_workers, queue.max_workers, queue.weight)
                for name in declared
                for queue in (effective[name][0],)
            ],
        )
        overflow = held.overflow
    rows = []
    for name in names:
        queue, problems = effective[name]
        rate = queue.rate_limit
        rows.append(
            {
                "queue": name,
                "configured": name in settings.queues,
                "reserved": queue.max_workers if limit is None else floors[name],
                "max_workers": queue.max_workers,
                "weight": queue.weight,
                "saturated": None if limit is None else floors[name] + shares.get(name, 0),
                "claimers": queue.claimers,
                "claim_batch_size": queue.claim_batch_size,
                "rate_limit": None if rate is None else [rate.max_rate, rate.burst],
                "poll_interval": queue.poll_interval,
                "deadline": queue.deadline,
                "overrides": dict(stored.get(name, {})),
                "invalid_overrides": problems,
            }
        )
    return {
        "mode": "reserved" if limit is None else "weighted",
        "global_max_workers": limit,
        "overflow": overflow,
        "queues": rows,
    }
