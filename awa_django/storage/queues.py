"""Queue control (pause, resume, drain) and the per-queue view of the console.

A striped queue (:mod:`awa_django.domain.stripes`) is one queue here: its pause
is the logical queue's control row (the claim checks it for every stripe),
drain and enqueue shards apply to each stripe, and the reads report
logical names, with the stripes' counts summed.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from ..domain import stripes
from ..domain.records import DescriptorInfo
from . import descriptors
from .base import Execute, Steps, atomic_operation, operation


@atomic_operation
def pause(queue: str) -> Steps[bool]:
    """Stop every worker from claiming ``queue``; True when this call paused it."""
    yield Execute.named("queues", "ensure_queue_meta", {"queue": queue})
    rows = yield Execute.named("queues", "pause_queue", {"queue": queue})
    return bool(rows)


@operation
def resume(queue: str) -> Steps[bool]:
    """Let workers claim ``queue`` again; True when it was paused."""
    rows = yield Execute.named("queues", "resume_queue", {"queue": queue})
    return bool(rows)


@atomic_operation
def drain(queue: str, reason: str) -> Steps[int]:
    """Cancel every available and scheduled job of ``queue`` (of each of its
    stripes); returns how many."""
    drained = 0
    for name in stripes.physical_queues(queue):
        rows = yield Execute.named("queues", "drain_queue", {"queue": name, "reason": reason})
        drained += int(rows[0][0])
    return drained


@operation
def state_counts() -> Steps[dict[str, dict[str, int]]]:
    """``queue -> state -> count`` for every queue with a job in some state."""
    rows = yield Execute.named("jobs", "state_counts")
    counts: dict[str, dict[str, int]] = {}
    for queue, state, n in rows:
        counts.setdefault(queue, {})[state] = int(n)
    return stripes.fold(counts)


@operation
def meta() -> Steps[dict[str, tuple[dt.datetime | None, int]]]:
    """``queue -> (paused_at, enqueue_shards)`` of every queue with a control row."""
    rows = yield Execute.named("queues", "queue_meta")
    # A stripe's row only repeats its queue's enqueue shards.
    return {
        queue: (paused_at, shards)
        for queue, paused_at, shards in rows
        if stripes.stripe_index(queue) is None
    }


@atomic_operation
def set_enqueue_shards(queue: str, shards: int) -> Steps[int]:
    """Set how many enqueue shards (lanes per priority) ``queue`` (each of its
    stripes) has; returns the old count of the queue."""
    before = None
    for name in stripes.physical_queues(queue):
        params = {"queue": name, "shards": shards}
        rows = yield Execute.named("queues", "set_enqueue_shards", params)
        before = int(rows[0][0]) if before is None else before
    assert before is not None
    return before


@operation
def known() -> Steps[list[str]]:
    """Every queue the database knows of (lanes, control rows, descriptors, rollups)."""
    rows = yield Execute.named("queues", "known_queues")
    return sorted({stripes.logical_queue(queue) for (queue,) in rows})


@operation
def overview(
    staleness: float,
) -> Steps[
    tuple[
        dict[str, dict[str, int]],
        dict[str, tuple[dt.datetime | None, int]],
        list[str],
        dict[str, DescriptorInfo],
    ]
]:
    """What the queue list shows: counts, control rows, known queues, labels."""
    counts = yield from state_counts().steps
    paused_at = yield from meta().steps
    names = yield from known().steps
    labels = yield from descriptors.status("queue", staleness).steps
    return counts, paused_at, names, {d.name: d for d in labels}


@operation
def sample(keep: float) -> Steps[int]:
    """Record every queue's counters now; drop samples older than ``keep`` seconds."""
    rows = yield Execute.named("queues", "sample_queues", [keep])
    return int(rows[0][0])


@operation
def samples(
    since: dt.datetime, queue: str | None = None
) -> Steps[list[tuple[dt.datetime, str, dict[str, int]]]]:
    """``(sampled_at, queue, counts)`` since ``since``, oldest first (a striped
    queue's stripes summed into one row per sample)."""
    names = None if queue is None else list(stripes.physical_queues(queue))
    rows = yield Execute.named("queues", "queue_samples", {"since": since, "queues": names})
    summed: dict[tuple[dt.datetime, str], dict[str, int]] = {}
    for at, name, counts in rows:
        into = summed.setdefault((at, stripes.logical_queue(name)), {})
        for state, n in json.loads(counts).items():
            into[state] = into.get(state, 0) + n
    return [(at, name, counts) for (at, name), counts in sorted(summed.items())]


@operation
def gauges() -> Steps[list[tuple[str, int, int, int, float, bool]]]:
    """``(queue, available, scheduled, running, lag, paused)`` of every queue
    with lanes, a control row or live jobs, cheap enough to read every few
    seconds: exact counts from the lane heads and the small tables, never a
    walk over the ready ring.  ``scheduled`` counts every deferred job
    (scheduled, or waiting to retry); ``lag`` is the age in seconds of the
    oldest available job (0 when none waits), read from the head of each lane.
    A striped queue is one row: its stripes' counts summed, the oldest lag,
    paused when its control row says so."""
    rows = yield Execute.named("queues", "queue_gauges")
    merged: dict[str, tuple[int, int, int, float, bool]] = {}
    for name, available, scheduled, running, lag, paused in rows:
        queue = stripes.logical_queue(name)
        a, s, r, oldest, off = merged.get(queue, (0, 0, 0, 0.0, False))
        merged[queue] = (
            a + int(available),
            s + int(scheduled),
            r + int(running),
            max(oldest, float(lag)),
            off or bool(paused),
        )
    return [(queue, *values) for queue, values in merged.items()]


@operation
def depths(queues: Sequence[str]) -> Steps[dict[str, tuple[int, bool]]]:
    """``queue -> (available, paused)`` of each of the logical ``queues``, in one
    cheap statement: the exact count of available jobs from the lane
    counters (its stripes' summed), never a walk over the ready ring, and
    whether the queue's control row says it is paused."""
    names = stripes.physical_names(queues)
    rows = yield Execute.named("queues", "available_depth", {"queues": names})
    found = {name: (int(available), bool(paused)) for name, available, paused in rows}
    result: dict[str, tuple[int, bool]] = {}
    for queue in queues:
        parts = stripes.physical_queues(queue)
        # A stripe's pause is its logical queue's control row.
        result[queue] = (sum(found[name][0] for name in parts), found[queue][1])
    return result
