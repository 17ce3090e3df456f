"""Live queue overrides: change a queue's dispatch options on every running
worker without a restart.

The overrides are rows workers re-read every ``OVERRIDE_REFRESH_INTERVAL``;
values are checked like the same options of ``AWA["QUEUES"]``
(``awa_django.overrides``) before anything is written.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from ..domain.overrides import check_keys, check_overrides
from ..domain.payload import check_queue
from ..storage import overrides as override_store
from ..storage.base import run
from .audit import audited


def set_queue_override(
    queue: str, *, actor: str | None = None, database: str | None = None, **values: Any
) -> dict[str, Any]:
    """Override options of ``queue`` on every running worker, without a restart.

    ``values`` are any of ``poll_interval``, ``claim_batch_size``,
    ``max_workers``, ``rate_limit`` and ``deadline``, checked like the same
    options of ``AWA["QUEUES"]`` (``rate_limit=None`` lifts the limit).  Keys
    not given keep their current override, if any.  An unknown key or a bad
    value raises ``InvalidJob`` naming it, and nothing is written.  Workers
    running the queue apply the change within a few seconds
    (``OVERRIDE_REFRESH_INTERVAL``): the batch size and deadline from their
    next claim, ``max_workers`` by resizing the queue's permits (running
    jobs finish when it shrinks).  Returns the queue's overrides now in
    effect, as stored (durations in seconds, ``rate_limit`` as
    ``[max_rate, burst]``).
    """
    name = check_queue(queue)
    checked = check_overrides(values)
    with audited(
        actor,
        "set_queue_override",
        f"queue {name}",
        queue=name,
        detail=dict(checked),
        database=database,
    ) as action:
        now = run(override_store.set_values(name, checked), database)
        action.done(len(checked))
    return now


def queue_overrides(
    queue: str | None = None, *, database: str | None = None
) -> dict[str, dict[str, Any]]:
    """``queue -> {option: value}`` of the live overrides (of every queue, or one)."""
    names = None if queue is None else [check_queue(queue)]
    return run(override_store.read(names), database)


def clear_queue_override(
    queue: str, *keys: str, actor: str | None = None, database: str | None = None
) -> list[str]:
    """Drop overrides of ``queue`` (the given options, or every one): workers
    return to their settings within a few seconds.  Returns the options that
    were overridden and no longer are; an option that cannot be overridden
    raises ``InvalidJob``."""
    name = check_queue(queue)
    chosen = check_keys(keys) if keys else None
    with audited(
        actor,
        "clear_queue_override",
        f"queue {name}",
        queue=name,
        detail={"keys": list(chosen) if chosen else "all"},
        database=database,
    ) as action:
        cleared = run(override_store.clear(name, chosen), database)
        action.done(len(cleared))
    return cleared


aset_queue_override = sync_to_async(set_queue_override)
aqueue_overrides = sync_to_async(queue_overrides)
aclear_queue_override = sync_to_async(clear_queue_override)
