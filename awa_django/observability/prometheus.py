"""Prometheus metrics (the ``prometheus`` extra): an observer over prometheus_client.

:class:`PrometheusObserver` turns the hooks into the instruments of the
table in :mod:`.metrics` -- one Counter, Histogram or Gauge per entry, named
by :func:`~.metrics.prometheus_name`, labelled by the entry's attributes --
so a name on a Grafana panel, in the OpenTelemetry exporter and here is the
same metric.  The worker registers one when it serves ``/metrics`` on its
health listener (``awa_worker --health-addr``); nothing imports
prometheus_client otherwise, and without it the probes still answer.

Two things are not counters of events and need a word:

* Queue depth and lag are measured by the maintenance leader only.  When
  this process stops leading (or a queue is no longer sampled) its series
  are dropped, so a former leader never exports old depths next to the new
  leader's fresh ones.  Dashboards aggregate them with ``max by (queue)``.
* ``--processes N`` runs prometheus_client's multiprocess mode: the
  supervisor points ``PROMETHEUS_MULTIPROC_DIR`` at a directory before it
  starts the children, each child writes its values to files there, and the
  supervisor's ``/metrics`` merges them (:func:`multiprocess_exposition`).
  Gauges then say how values of several processes combine
  (:data:`MULTIPROCESS_MODES`: one runtime-up per live process adds up, the
  queue gauges take the most recent value), and a dropped queue series is
  set to NaN instead, since files cannot forget a series.
"""

from __future__ import annotations

import collections
import importlib.util
import math
import os
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..domain.records import DLQ, RETRYABLE, ClaimedJob, Closure, PreparedJob
from . import metrics as m
from .hooks import Observer, QueueSample

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

#: What ``/metrics`` says when prometheus_client is missing.
NOT_INSTALLED = (
    "prometheus_client is not installed; install the prometheus extra "
    "(pip install 'awa-django[prometheus]') to serve /metrics"
)
#: The environment variable of prometheus_client's multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Bucket bounds in seconds.  Jobs run from milliseconds to an hour; a claim
# statement takes a millisecond or so, and seconds only when something is wrong.
BUCKETS: dict[str, tuple[float, ...]] = {
    m.JOB_DURATION.name: (
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
    ),
    m.CLAIM_DURATION.name: (
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
    ),
    m.TASK_DURATION.name: (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
}  # fmt: skip

#: How a gauge combines the values of several processes in multiprocess mode.
MULTIPROCESS_MODES: dict[str, str] = {
    m.RUNTIME_UP.name: "livesum",
    m.RUNTIME_LEADER.name: "livemax",
    m.INFLIGHT.name: "livesum",
    m.QUEUE_DEPTH.name: "livemostrecent",
    m.QUEUE_LAG.name: "livemostrecent",
    m.OUTBOX_PENDING.name: "livemostrecent",
    m.OUTBOX_LAG.name: "livemostrecent",
}

_DEPTH_STATES = ("available", "scheduled", "running")
_RING_SUFFIX = "_ring"


def available() -> bool:
    """Whether prometheus_client is installed (looked up, not imported)."""
    try:
        return importlib.util.find_spec("prometheus_client") is not None
    except (ImportError, ValueError):
        return False


def _client() -> ModuleType:
    """prometheus_client, or ImportError saying what to install."""
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(NOT_INSTALLED) from exc
    return prometheus_client


def multiprocess() -> bool:
    """Whether prometheus_client records to files here (``PROMETHEUS_MULTIPROC_DIR``)."""
    return bool(os.environ.get(MULTIPROC_ENV))


class PrometheusObserver(Observer):
    """Records every metric of :data:`.metrics.ALL` into ``registry``.

    Without a ``registry`` the observer gets one of its own (not
    prometheus_client's global one, so that two workers in one process do
    not collide); :func:`worker_registry` adds the process collectors.
    Raises ImportError, with what to install, without prometheus_client.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        client = _client()
        self.registry = registry if registry is not None else _registry()
        self._multiprocess = multiprocess()
        self._counters: dict[str, Counter] = {}
        self._histograms: dict[str, Histogram] = {}
        self._gauges: dict[str, Gauge] = {}
        for metric in m.ALL:
            self._declare(client, metric)
        self._sampled: set[str] = set()

    def _declare(self, client: ModuleType, metric: m.Metric) -> None:
        name = m.prometheus_name(metric)
        common: dict[str, Any] = {
            "labelnames": metric.attributes,
            "registry": self.registry,
        }
        if metric.instrument == m.COUNTER:
            # prometheus_client adds the _total suffix itself.
            self._counters[metric.name] = client.Counter(
                name.removesuffix("_total"), metric.description, **common
            )
        elif metric.instrument == m.HISTOGRAM:
            buckets = BUCKETS.get(metric.name, client.Histogram.DEFAULT_BUCKETS)
            self._histograms[metric.name] = client.Histogram(
                name, metric.description, buckets=buckets, **common
            )
        elif metric.instrument == m.GAUGE:
            mode = MULTIPROCESS_MODES.get(metric.name, "all")
            self._gauges[metric.name] = client.Gauge(
                name, metric.description, multiprocess_mode=mode, **common
            )
        else:  # pragma: no cover - the table's own invariant
            raise ValueError(f"{metric.name}: unknown instrument {metric.instrument!r}")

    # -- producer side -----------------------------------------------------

    def enqueued(self, jobs: Sequence[PreparedJob], ids: Sequence[int | None]) -> None:
        written = collections.Counter(
            (prepared.queue, prepared.kind)
            for prepared, job_id in zip(jobs, ids, strict=True)
            if job_id is not None
        )
        counter = self._counters[m.ENQUEUED.name]
        for (queue, kind), count in written.items():
            counter.labels(queue, kind).inc(count)

    # -- worker side -------------------------------------------------------

    def claimed(self, queue: str, wanted: int, claimed: int, seconds: float) -> None:
        self._counters[m.CLAIMS.name].labels(queue).inc()
        if claimed:
            self._counters[m.CLAIMED.name].labels(queue).inc(claimed)
        else:
            self._counters[m.EMPTY_CLAIMS.name].labels(queue).inc()
        self._histograms[m.CLAIM_DURATION.name].labels(queue).observe(seconds)

    def closed(self, job: ClaimedJob, closure: Closure, applied: bool, seconds: float) -> None:
        if not applied:
            self._counters[m.STALE.name].labels(job.queue, job.kind).inc()
            return
        outcome = closure.outcome
        self._counters[m.OUTCOMES.name].labels(job.queue, job.kind, outcome).inc()
        self._histograms[m.JOB_DURATION.name].labels(job.queue, job.kind, outcome).observe(seconds)
        if closure.target == RETRYABLE:
            self._counters[m.RETRIES.name].labels(job.queue, job.kind).inc()
        elif closure.target == DLQ:
            self._counters[m.DLQ_MOVES.name].labels(job.queue, job.kind).inc()

    def maintained(self, task: str, result: object, seconds: float) -> None:
        self._histograms[m.TASK_DURATION.name].labels(task).observe(seconds)
        if task.endswith(_RING_SUFFIX) and isinstance(result, dict):
            ring = task.removesuffix(_RING_SUFFIX)
            if "rotate" in result:
                self._counters[m.ROTATIONS.name].labels(ring, str(result["rotate"])).inc()
            if "prune" in result:
                self._counters[m.PRUNES.name].labels(ring, str(result["prune"])).inc()

    def rescued(self, reason: str, count: int) -> None:
        self._counters[m.RESCUES.name].labels(reason).inc(count)

    def queues_sampled(self, samples: Sequence[QueueSample]) -> None:
        depth = self._gauges[m.QUEUE_DEPTH.name]
        lag = self._gauges[m.QUEUE_LAG.name]
        seen: set[str] = set()
        for sample in samples:
            depth.labels(sample.queue, "available").set(sample.available)
            depth.labels(sample.queue, "scheduled").set(sample.scheduled)
            depth.labels(sample.queue, "running").set(sample.running)
            lag.labels(sample.queue).set(sample.lag)
            seen.add(sample.queue)
        self._forget(self._sampled - seen)
        self._sampled = seen

    def outbox_sampled(self, pending: int, lag: float) -> None:
        self._gauges[m.OUTBOX_PENDING.name].set(pending)
        self._gauges[m.OUTBOX_LAG.name].set(lag)

    def runtime(self, state: str) -> None:
        if state == "started":
            self._gauges[m.RUNTIME_UP.name].set(1)
        elif state == "leader":
            self._gauges[m.RUNTIME_LEADER.name].set(1)
        elif state == "follower":
            self._gauges[m.RUNTIME_LEADER.name].set(0)
            self._forget(self._sampled)
            self._sampled = set()
        elif state == "stopped":
            for metric in (m.RUNTIME_UP, m.RUNTIME_LEADER, m.INFLIGHT):
                self._gauges[metric.name].set(0)

    def set_inflight(self, count: int) -> None:
        """Attempts this process runs now (sampled by the worker's health ticker)."""
        self._gauges[m.INFLIGHT.name].set(count)

    def _forget(self, queues: set[str]) -> None:
        depth = self._gauges[m.QUEUE_DEPTH.name]
        lag = self._gauges[m.QUEUE_LAG.name]
        for queue in queues:
            if self._multiprocess:
                for state in _DEPTH_STATES:
                    depth.labels(queue, state).set(math.nan)
                lag.labels(queue).set(math.nan)
                continue
            for state in _DEPTH_STATES:
                try:
                    depth.remove(queue, state)
                except KeyError:
                    pass
            try:
                lag.remove(queue)
            except KeyError:
                pass


def metric_names() -> set[str]:
    """Every series name the observer can expose (histograms with their
    ``_bucket``, ``_sum`` and ``_count`` series), for checking dashboards."""
    names: set[str] = set()
    for metric in m.ALL:
        name = m.prometheus_name(metric)
        if metric.instrument == m.HISTOGRAM:
            names.update(f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
        else:
            names.add(name)
    return names


def _registry() -> CollectorRegistry:
    _client()
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


def worker_registry() -> CollectorRegistry:
    """A registry for one worker process's ``/metrics``: awa's metrics plus the
    process, platform and garbage-collector collectors of prometheus_client."""
    _client()
    from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

    registry = _registry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry) -> tuple[bytes, str]:
    """``registry`` in the text exposition format: (body, content type)."""
    _client()
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(registry), CONTENT_TYPE_LATEST


def multiprocess_exposition(path: str) -> tuple[bytes, str]:
    """What the processes writing to ``path`` recorded, merged: (body, content type)."""
    _client()
    from prometheus_client import multiprocess as mp

    registry = _registry()
    mp.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return exposition(registry)


def mark_process_dead(pid: int, path: str) -> None:
    """Drop the live-mode gauges of a child that exited (its counters stay)."""
    _client()
    from prometheus_client import multiprocess as mp

    mp.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]
