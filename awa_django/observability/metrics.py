"""The metrics awa records: one table both exporters (OpenTelemetry and
Prometheus) build their instruments from, so a name means the same thing
in both and the example Grafana dashboard can be checked against it.

Names follow OpenTelemetry's dotted style; :func:`prometheus_name` gives the
Prometheus spelling (dots to underscores, the unit as a suffix, ``_total``
on counters).  Attributes are low-cardinality: queue, kind, outcome, ring,
task, reason -- never a job id.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str
    #: ``counter``, ``histogram`` or ``gauge``.
    instrument: str
    unit: str
    description: str
    attributes: tuple[str, ...] = ()


COUNTER, HISTOGRAM, GAUGE = "counter", "histogram", "gauge"

ENQUEUED = Metric(
    "awa.job.enqueued", COUNTER, "{job}", "Jobs written by producers.", ("queue", "kind")
)
CLAIMS = Metric("awa.dispatch.claims", COUNTER, "{claim}", "Claim statements issued.", ("queue",))
EMPTY_CLAIMS = Metric(
    "awa.dispatch.empty_claim",
    COUNTER,
    "{claim}",
    "Claim statements that found no job (a wake-up or poll for nothing).",
    ("queue",),
)
CLAIMED = Metric("awa.dispatch.claimed", COUNTER, "{job}", "Jobs claimed.", ("queue",))
CLAIM_DURATION = Metric(
    "awa.dispatch.claim.duration",
    HISTOGRAM,
    "s",
    "Time one claim statement took, empty ones included.",
    ("queue",),
)
JOB_DURATION = Metric(
    "awa.job.duration",
    HISTOGRAM,
    "s",
    "From the start of the handler until its outcome was durable.",
    ("queue", "kind", "outcome"),
)
OUTCOMES = Metric(
    "awa.job.outcomes",
    COUNTER,
    "{attempt}",
    "Closed attempts by outcome (completed, retryable, failed, cancelled, dlq, snoozed, ...).",
    ("queue", "kind", "outcome"),
)
RETRIES = Metric(
    "awa.job.retries", COUNTER, "{attempt}", "Failed attempts that will retry.", ("queue", "kind")
)
DLQ_MOVES = Metric(
    "awa.job.dlq", COUNTER, "{job}", "Jobs failed into the dead-letter queue.", ("queue", "kind")
)
STALE = Metric(
    "awa.job.stale_completions",
    COUNTER,
    "{attempt}",
    "Completions rejected because the attempt was already closed (rescued, cancelled).",
    ("queue", "kind"),
)
RESCUES = Metric(
    "awa.maintenance.rescued",
    COUNTER,
    "{attempt}",
    "Abandoned attempts the leader closed.",
    ("reason",),
)
ROTATIONS = Metric(
    "awa.maintenance.rotate",
    COUNTER,
    "{rotation}",
    "Ring rotation attempts by outcome.",
    ("ring", "outcome"),
)
PRUNES = Metric(
    "awa.maintenance.prune",
    COUNTER,
    "{prune}",
    "Ring prune attempts by outcome.",
    ("ring", "outcome"),
)
TASK_DURATION = Metric(
    "awa.maintenance.task.duration",
    HISTOGRAM,
    "s",
    "One tick of a maintenance task.",
    ("task",),
)
QUEUE_DEPTH = Metric(
    "awa.queue.depth",
    GAUGE,
    "{job}",
    "Jobs of a queue by state (available, scheduled, running), as the leader sampled them.",
    ("queue", "state"),
)
QUEUE_LAG = Metric(
    "awa.queue.lag",
    GAUGE,
    "s",
    "Age of the oldest available job of a queue (0 when none waits).",
    ("queue",),
)
OUTBOX_PENDING = Metric(
    "awa.outbox.pending",
    GAUGE,
    "{job}",
    "Outbox mode: jobs committed to the outbox and not relayed to the queue yet.",
)
OUTBOX_LAG = Metric(
    "awa.outbox.lag",
    GAUGE,
    "s",
    "Outbox mode: age of the oldest job waiting in the outbox (0 when none waits).",
)
RUNTIME_UP = Metric(
    "awa.runtime.up", GAUGE, "1", "1 while this worker process runs, 0 once it stops."
)
RUNTIME_LEADER = Metric(
    "awa.runtime.leader",
    GAUGE,
    "1",
    "1 while this worker process holds the maintenance leadership.",
)
INFLIGHT = Metric(
    "awa.runtime.inflight", GAUGE, "{attempt}", "Attempts this worker process runs now."
)

ALL: tuple[Metric, ...] = (
    ENQUEUED,
    CLAIMS,
    EMPTY_CLAIMS,
    CLAIMED,
    CLAIM_DURATION,
    JOB_DURATION,
    OUTCOMES,
    RETRIES,
    DLQ_MOVES,
    STALE,
    RESCUES,
    ROTATIONS,
    PRUNES,
    TASK_DURATION,
    QUEUE_DEPTH,
    QUEUE_LAG,
    OUTBOX_PENDING,
    OUTBOX_LAG,
    RUNTIME_UP,
    RUNTIME_LEADER,
    INFLIGHT,
)

_UNIT_SUFFIX = {"s": "seconds", "1": "", "By": "bytes"}


def prometheus_name(metric: Metric) -> str:
    """``awa.dispatch.claim.duration`` (s, histogram) -> ``awa_dispatch_claim_duration_seconds``."""
    name = metric.name.replace(".", "_")
    suffix = _UNIT_SUFFIX.get(metric.unit, "")
    if suffix and not name.endswith(suffix):
        name = f"{name}_{suffix}"
    if metric.instrument == COUNTER:
        name += "_total"
    return name
