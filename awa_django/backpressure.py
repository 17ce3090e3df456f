"""Backpressure: producers wait while a queue holds too many available jobs.

``enqueue_many(jobs, max_queue_depth=N, wait=s)`` and
``ops.wait_for_room(queue, N, timeout)`` (and their async twins) share the
check and the wait defined here.

The check.  A queue's *depth* is its number of available jobs: due, not
claimed, not cancelled.  It is read from the lane counters, exactly
(``storage.queues.depths``, one statement whatever the backlog): each
lane's enqueue head less its claim cursor, less the tombstones beyond the
cursor.  It never walks the ready ring, so a producer may ask before every
batch.  A striped queue's depth sums its stripes; scheduled and
retry-waiting jobs do not count until they are due and promoted.  A batch
passes when every queue it writes to holds at most N available jobs, so
right after it the queue holds at most N plus that batch.

The bound is per producer: the check reads committed counters, and two
producers that check at the same moment both pass, so with P producers
sending batches of B the depth stays below N + P * B.  Making it exact
would mean serialising every producer of a queue on a lock from its check
to its commit, the cost lanes and shards exist to avoid.

The wait.  Nothing announces that a queue got shorter: workers NOTIFY
nobody when they claim or complete, and a channel for that would cost a
NOTIFY per claim batch on the hot path for the rare producer that waits.
So a waiting producer polls: first after :data:`POLL_FIRST` seconds, then
doubling up to :data:`POLL_MAX` (the default queue ``poll_interval``), each
pause jittered so that producers which hit the limit together do not keep
checking together, and never past the deadline.  A producer therefore
waits at most about ``POLL_MAX`` longer than it had to, and a long wait
costs five statements a second.  When ``wait`` runs out, the last check is
reported as ``QueueFull`` and nothing is written.

Transactions.  Waiting inside ``transaction.atomic()`` would keep that
transaction open -- its row locks, its lane locks if it has enqueued
already, a connection idle in transaction -- for as long as the queue
stays full, and the workers it waits for may need those very rows.  So a
nonzero wait inside an atomic block (or with autocommit off) is refused
with ``InvalidJob`` before anything is read; ``wait=0`` there checks once
and raises ``QueueFull`` at once when the queue is full, which leaves the
transaction usable.  Wait before opening the transaction instead
(:func:`wait_for_room`), or check once inside it.

Paused queues count like any other: their depth does not fall while they
are paused, so a producer waits until an operator resumes the queue (or
its wait runs out; ``QueueFull.paused`` then says why).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
from collections.abc import Iterable
from typing import Any

from asgiref.sync import sync_to_async

from .domain.payload import check_queue, seconds
from .exceptions import InvalidJob, QueueFull
from .storage import queues as queue_store
from .storage.base import run
from .storage.connection import alias_for, django_connection

#: Seconds before the second check of a full queue.
POLL_FIRST = 0.005
#: The longest pause between two checks (the default queue ``poll_interval``).
POLL_MAX = 0.2
#: What the arguments are called in ``enqueue_many`` (error messages name them).
ENQUEUE_NAMES = ("max_queue_depth", "wait")


def check_limit(
    max_depth: Any, wait: Any, names: tuple[str, str] = ENQUEUE_NAMES
) -> tuple[int, float]:
    """``(max_depth, wait)`` validated: a non-negative integer and seconds
    (int/float or timedelta, not negative); ``InvalidJob`` naming the
    argument (``names``) otherwise."""
    if not isinstance(max_depth, int) or isinstance(max_depth, bool):
        raise InvalidJob(f"{names[0]} must be an integer, got {max_depth!r}")
    if max_depth < 0:
        raise InvalidJob(f"{names[0]} must not be negative, got {max_depth}")
    return max_depth, seconds(wait, names[1])


def check_queues(queues: Iterable[Any]) -> list[str]:
    """The distinct queue names, validated, in a stable order."""
    return sorted({check_queue(queue) for queue in queues})


def _may_wait(alias: str, wait: float) -> None:
    if wait <= 0:
        return
    connection = django_connection(alias)
    if connection.in_atomic_block or not connection.get_autocommit():
        raise InvalidJob(
            f"cannot wait {wait:g}s for queue room inside a transaction on {alias!r}: it would "
            "stay open (with its locks) until the queue drains; wait before "
            "transaction.atomic(), or give a wait of 0 to check once"
        )


Probe = tuple[int, tuple[str, int, bool] | None]


def _probe(queues: list[str], max_depth: int, alias: str, wait: float) -> Probe:
    """One check: the largest depth of ``queues``, and the first of them
    holding more than ``max_depth`` available jobs (with its depth and pause
    flag), or None when all have room."""
    _may_wait(alias, wait)
    depths = run(queue_store.depths(queues), alias)
    deepest = max((depth for depth, _ in depths.values()), default=0)
    for queue in queues:
        depth, paused = depths[queue]
        if depth > max_depth:
            return deepest, (queue, depth, paused)
    return deepest, None


def _pauses(deadline: float) -> Iterable[float]:
    """Pauses between checks: doubling from POLL_FIRST to POLL_MAX, jittered,
    never past ``deadline``."""
    delay = POLL_FIRST
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        # Jitter spreads producers that hit the limit together; nothing to guard.
        yield min(delay * random.uniform(0.5, 1.0), left)  # noqa: S311
        delay = min(delay * 2, POLL_MAX)


def wait_for_room(
    queues: Iterable[str],
    max_depth: int,
    wait: float | dt.timedelta,
    database: str | None = None,
    *,
    names: tuple[str, str] = ENQUEUE_NAMES,
) -> int:
    """Return once every one of ``queues`` holds at most ``max_depth``
    available jobs, checking at once and then polling for up to ``wait``
    seconds; raise ``QueueFull`` when they do not.  Returns the largest depth
    of the passing check.  A nonzero ``wait`` inside a transaction raises
    ``InvalidJob`` (see the module docstring)."""
    targets = check_queues(queues)
    max_depth, wait = check_limit(max_depth, wait, names)
    alias = alias_for(database)
    start = time.monotonic()
    deepest, full = _probe(targets, max_depth, alias, wait)
    for pause in _pauses(start + wait):
        if full is None:
            break
        time.sleep(pause)
        deepest, full = _probe(targets, max_depth, alias, wait)
    if full is not None:
        raise _queue_full(full, max_depth, start)
    return deepest


async def await_for_room(
    queues: Iterable[str],
    max_depth: int,
    wait: float | dt.timedelta,
    database: str | None = None,
    *,
    names: tuple[str, str] = ENQUEUE_NAMES,
) -> int:
    """:func:`wait_for_room` for async producers: each check runs on Django's
    connection in a worker thread, the pauses on the event loop, so no thread
    is held while the queue is full."""
    targets = check_queues(queues)
    max_depth, wait = check_limit(max_depth, wait, names)
    alias = alias_for(database)
    probe = sync_to_async(_probe)
    start = time.monotonic()
    deepest, full = await probe(targets, max_depth, alias, wait)
    for pause in _pauses(start + wait):
        if full is None:
            break
        await asyncio.sleep(pause)
        deepest, full = await probe(targets, max_depth, alias, wait)
    if full is not None:
        raise _queue_full(full, max_depth, start)
    return deepest


def _queue_full(full: tuple[str, int, bool], max_depth: int, start: float) -> QueueFull:
    queue, depth, paused = full
    return QueueFull(queue, depth, max_depth, waited=time.monotonic() - start, paused=paused)
