"""The names awa's OpenTelemetry signals carry, their attribute sets and instruments.

Metrics
    One instrument per entry of :data:`.metrics.ALL`, built from the table
    (name, kind, unit, description, attribute names), so OpenTelemetry and
    Prometheus agree on every name.  Histograms are recorded as things
    happen.  Counters are asynchronous (observable) counters over running
    totals the hooks keep per attribute set: counting a job is a dict update,
    not a call into the SDK (the exported data is the same monotonic sum;
    only exemplars are left out).  Gauges are observable too and read what
    the hooks left behind: the leader's last queue sample
    (``awa.queue.depth``/``awa.queue.lag``, reported by the leader only, and
    dropped when it steps down or the sample grows old) and this process's
    runtime state.

The instrumentation scope, the messaging semantic-convention attributes and
awa's own, the histogram buckets, and the two small structures that keep
the hot path free of allocations and SDK calls: :class:`Attributes` (one
attribute dict per value tuple, built once) and :class:`Totals` (running
counter totals an observable counter reports).  Split from :mod:`.otel` so
the observer reads as what it records, not how names are spelled.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from . import metrics as table

#: The instrumentation scope: what a backend shows as the library that
#: produced a span or a metric.
SCOPE = "awa_django"

# Semantic-convention attribute names (messaging spans).
MESSAGING_SYSTEM = "messaging.system"
MESSAGING_DESTINATION = "messaging.destination.name"
MESSAGING_OPERATION_TYPE = "messaging.operation.type"
MESSAGING_MESSAGE_ID = "messaging.message.id"
MESSAGING_BATCH_COUNT = "messaging.batch.message_count"
SYSTEM = "awa"
# awa's own span attributes.
JOB_KIND = "awa.job.kind"
JOB_ATTEMPT = "awa.job.attempt"
JOB_OUTCOME = "awa.job.outcome"
JOB_STALE = "awa.job.stale"

#: Histogram buckets (seconds) of the ``s`` histograms: job and claim
#: durations run from sub-millisecond no-ops to minutes-long handlers.
SECONDS_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

#: A queue sample older than this is not reported (four intervals of the
#: leader's ``queue_gauges`` task): a leader that stopped sampling must not
#: freeze its last reading into the dashboards.
SAMPLE_MAX_AGE = 60.0

# Attribute dicts cached per key are bounded: a pathological number of
# queues or kinds must not grow the process without end.
CACHE_LIMIT = 4096


class Attributes:
    """Attribute dicts for one set of attribute names, one per value tuple.

    Instruments get the same dict object for the same values, built once:
    nothing is allocated per job.
    """

    __slots__ = ("_cache", "_names")

    def __init__(self, *names: str) -> None:
        self._names = names
        self._cache: dict[tuple[str, ...], dict[str, str]] = {}

    def __call__(self, *values: str) -> dict[str, str]:
        attributes = self._cache.get(values)
        if attributes is None:
            attributes = dict(zip(self._names, values, strict=True))
            if len(self._cache) < CACHE_LIMIT:
                self._cache[values] = attributes
        return attributes


class Totals:
    """Running totals of one counter per attribute values, reported by an
    observable counter.  Adding is a dict update under a lock (producer
    threads count enqueues concurrently); no SDK call per event."""

    __slots__ = ("_lock", "_names", "_totals")

    def __init__(self, *names: str) -> None:
        self._names = names
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, ...], list[Any]] = {}

    def add(self, values: tuple[str, ...], amount: int = 1) -> None:
        with self._lock:
            entry = self._totals.get(values)
            if entry is None:
                self._totals[values] = [dict(zip(self._names, values, strict=True)), amount]
            else:
                entry[1] += amount

    def observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            entries = [(attributes, total) for attributes, total in self._totals.values()]
        return [Observation(total, attributes) for attributes, total in entries]


def instruments(
    meter: Meter,
    totals: Mapping[str, Totals],
    gauges: Mapping[str, Callable[[CallbackOptions], Iterable[Observation]]],
) -> dict[str, Any]:
    """One instrument per entry of the metrics table: counters observe
    ``totals``, gauges call their entry of ``gauges``."""
    built: dict[str, Any] = {}
    for metric in table.ALL:
        if metric.instrument == table.COUNTER:
            built[metric.name] = meter.create_observable_counter(
                metric.name,
                callbacks=[totals[metric.name].observe],
                unit=metric.unit,
                description=metric.description,
            )
        elif metric.instrument == table.HISTOGRAM:
            built[metric.name] = meter.create_histogram(
                metric.name,
                unit=metric.unit,
                description=metric.description,
                explicit_bucket_boundaries_advisory=(
                    SECONDS_BUCKETS if metric.unit == "s" else None
                ),
            )
        elif metric.instrument == table.GAUGE:
            built[metric.name] = meter.create_observable_gauge(
                metric.name,
                callbacks=[gauges[metric.name]],
                unit=metric.unit,
                description=metric.description,
            )
        else:
            raise ValueError(f"{metric.name}: unknown instrument {metric.instrument!r}")
    return built
