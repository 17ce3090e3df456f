"""Queues: their counts and depth, pause, resume, drain, enqueue shards, and
the wait for room of producers that keep a queue bounded.

Counts come from the counters the storage keeps (no table is counted row
by row), so these functions stay cheap however long a queue is.  A pause
or a shard count is stored in the database: it holds for every process
and across restarts.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from asgiref.sync import sync_to_async

from .. import backpressure
from ..conf import awa_settings
from ..domain.payload import check_queue
from ..domain.records import JOB_STATES, QueueInfo
from ..exceptions import InvalidJob
from ..storage import jobs as job_store
from ..storage import queues as queue_store
from ..storage.base import run
from .arguments import check_text
from .audit import Action, audited


def state_counts(*, database: str | None = None) -> dict[str, dict[str, int]]:
    """``queue -> state -> count`` for every queue with jobs (states with none left out)."""
    return run(queue_store.state_counts(), database)


def queue_samples(
    *, since: dt.datetime, queue: str | None = None, database: str | None = None
) -> list[tuple[dt.datetime, str, dict[str, int]]]:
    """The counters the leader sampled (once a minute) since ``since``, oldest first."""
    if queue is not None:
        check_queue(queue)
    return run(queue_store.samples(since, queue), database)


def queue_counts(queue: str, *, database: str | None = None) -> dict[str, int]:
    """Number of jobs of ``queue`` in each state (every state key present), and
    ``"paused"``: whether the queue is paused (``True``/``False``, the flag of
    :func:`list_queues`).  To total the jobs, add up the states
    (``awa_django.records.JOB_STATES``) rather than every value."""
    return run(job_store.queue_counts(check_queue(queue)), database)


def queue_depth(queue: str, *, database: str | None = None) -> int:
    """The exact number of available jobs of ``queue`` (due, not yet claimed),
    read from its lane counters in one cheap statement however long the queue
    is: the figure ``max_queue_depth`` and :func:`wait_for_room` compare."""
    return run(queue_store.depths([check_queue(queue)]), database)[queue][0]


#: The names of ``wait_for_room``'s limits, for its error messages.
ROOM_NAMES = ("max_depth", "timeout")


def wait_for_room(
    queue: str, max_depth: int, timeout: float | dt.timedelta, *, database: str | None = None
) -> int:
    """Return once ``queue`` holds at most ``max_depth`` available jobs, polling
    for up to ``timeout`` seconds (0: check once); returns its depth then.
    Raises ``QueueFull`` when the queue is still over the limit at the
    deadline, and ``InvalidJob`` for a negative limit or timeout, or for a
    nonzero timeout inside ``transaction.atomic()`` (waiting would hold the
    transaction open).  See ``awa_django.backpressure``."""
    return backpressure.wait_for_room([queue], max_depth, timeout, database, names=ROOM_NAMES)


async def await_for_room(
    queue: str, max_depth: int, timeout: float | dt.timedelta, *, database: str | None = None
) -> int:
    """:func:`wait_for_room` for async producers: the pauses run on the event
    loop, the checks in Django's sync thread."""
    return await backpressure.await_for_room(
        [queue], max_depth, timeout, database, names=ROOM_NAMES
    )


def pause_queue(queue: str, *, actor: str | None = None, database: str | None = None) -> bool:
    """Stop every worker claiming ``queue``; True when this call paused it.

    Workers notice within one poll interval; attempts already running
    finish.  Jobs can still be enqueued.  The pause is stored in the
    database, so it holds for every process and across restarts.  ``actor``:
    who asked, for the audit log.
    """
    name = check_queue(queue)
    with _audited_queue(actor, "pause_queue", name, database) as action:
        paused = run(queue_store.pause(name), database)
        action.done(int(paused))
    return paused


def resume_queue(queue: str, *, actor: str | None = None, database: str | None = None) -> bool:
    """Let workers claim ``queue`` again; True when it was paused."""
    name = check_queue(queue)
    with _audited_queue(actor, "resume_queue", name, database) as action:
        resumed = run(queue_store.resume(name), database)
        action.done(int(resumed))
    return resumed


def _audited_queue(
    actor: str | None,
    action: str,
    queue: str,
    database: str | None,
    detail: dict[str, Any] | None = None,
) -> contextlib.AbstractContextManager[Action]:
    return audited(actor, action, f"queue {queue}", queue=queue, detail=detail, database=database)


def drain_queue(
    queue: str,
    *,
    reason: str = "drained by an operator",
    actor: str | None = None,
    database: str | None = None,
) -> int:
    """Cancel every available, scheduled, retry-waiting and dependency-waiting
    job of ``queue`` (the dependents of those, on any queue, follow their
    failure policy).

    Running attempts and parked callbacks finish as they would.  Returns how many
    jobs were cancelled; each keeps ``reason`` in its error history.
    """
    check_text(reason, "the drain reason")
    name = check_queue(queue)
    with _audited_queue(actor, "drain_queue", name, database, {"reason": reason}) as action:
        cancelled = run(queue_store.drain(name, reason), database)
        action.done(cancelled)
    return cancelled


def list_queues(*, database: str | None = None) -> list[QueueInfo]:
    """Every queue the settings declare or the database knows of, by name,
    with its counts per state, pause flag and descriptor labels."""
    settings = awa_settings()
    counts, control, known, labels = run(
        queue_store.overview(settings.heartbeat_staleness), database
    )
    names = sorted(set(settings.queues) | set(counts) | set(known))
    queues = []
    for name in names:
        label = labels.get(name)
        queues.append(
            QueueInfo(
                name=name,
                counts={**dict.fromkeys(JOB_STATES, 0), **counts.get(name, {})},
                paused=control.get(name, (None, 1))[0] is not None,
                paused_at=control.get(name, (None, 1))[0],
                configured=name in settings.queues,
                enqueue_shards=control.get(name, (None, 1))[1],
                display_name=label.display_name if label else None,
                description=label.description if label else None,
            )
        )
    return queues


def get_queue(queue: str, *, database: str | None = None) -> QueueInfo:
    """One queue of :func:`list_queues` (a queue nothing knows of has zero counts)."""
    name = check_queue(queue)
    for info in list_queues(database=database):
        if info.name == name:
            return info
    return QueueInfo(
        name=name,
        counts=dict.fromkeys(JOB_STATES, 0),
        paused=False,
        paused_at=None,
        configured=False,
    )


def set_enqueue_shards(
    queue: str, n: int, *, actor: str | None = None, database: str | None = None
) -> int:
    """Give ``queue`` ``n`` enqueue shards (1 to 64); returns the previous count.

    Each (queue, priority) gets ``n`` lanes: producers on different lanes no
    longer wait for each other's commit, and jobs are FIFO per lane instead
    of per queue.  A job with an ``ordering_key`` always goes to the lane its
    key hashes to, so jobs of one key stay in order.  Producers pick the new
    count up with their next enqueue; jobs already queued stay where they are
    (so a key's order holds across the change only once its old lane is
    empty).
    """
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_ENQUEUE_SHARDS:
        raise InvalidJob(f"enqueue shards must be an integer 1 to {MAX_ENQUEUE_SHARDS}, got {n!r}")
    name = check_queue(queue)
    with _audited_queue(actor, "set_enqueue_shards", name, database, {"shards": n}) as action:
        previous = run(queue_store.set_enqueue_shards(name, n), database)
        action.detail["previous"] = previous
        action.done(int(previous != n))
    return previous


#: The most enqueue shards a queue may have (the schema's CHECK).
MAX_ENQUEUE_SHARDS = 64


aqueue_counts = sync_to_async(queue_counts)
aqueue_depth = sync_to_async(queue_depth)
apause_queue = sync_to_async(pause_queue)
aresume_queue = sync_to_async(resume_queue)
adrain_queue = sync_to_async(drain_queue)
aset_enqueue_shards = sync_to_async(set_enqueue_shards)
alist_queues = sync_to_async(list_queues)
aget_queue = sync_to_async(get_queue)
