"""Queue control (pause, resume, drain) and the per-queue view of the console."""

from __future__ import annotations

import datetime as dt
import json

from ..records import DescriptorInfo
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
    """Cancel every available and scheduled job of ``queue``; returns how many."""
    rows = yield Execute.named("queues", "drain_queue", {"queue": queue, "reason": reason})
    return int(rows[0][0])


@operation
def state_counts() -> Steps[dict[str, dict[str, int]]]:
    """``queue -> state -> count`` for every queue with a job in some state."""
    rows = yield Execute.named("jobs", "state_counts")
    counts: dict[str, dict[str, int]] = {}
    for queue, state, n in rows:
        counts.setdefault(queue, {})[state] = int(n)
    return counts


@operation
def meta() -> Steps[dict[str, tuple[dt.datetime | None, int]]]:
    """``queue -> (paused_at, enqueue_shards)`` of every queue with a control row."""
    rows = yield Execute.named("queues", "queue_meta")
    return {queue: (paused_at, shards) for queue, paused_at, shards in rows}


@operation
def set_enqueue_shards(queue: str, shards: int) -> Steps[int]:
    """Set how many enqueue shards (lanes per priority) ``queue`` has; returns the old count."""
    rows = yield Execute.named("queues", "set_enqueue_shards", {"queue": queue, "shards": shards})
    return int(rows[0][0])


@operation
def known() -> Steps[list[str]]:
    """Every queue the database knows of (lanes, control rows, descriptors, rollups)."""
    rows = yield Execute.named("queues", "known_queues")
    return sorted(queue for (queue,) in rows)


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
    """``(sampled_at, queue, counts)`` since ``since``, oldest first."""
    rows = yield Execute.named("queues", "queue_samples", {"since": since, "queue": queue})
    return [(at, name, json.loads(counts)) for at, name, counts in rows]
