"""The Prometheus observer: the table's metrics under their Prometheus names.

The first tests drive the hooks of a :class:`PrometheusObserver` directly
(with its own registry) and read the exposition back through
prometheus_client's parser; the last ones run real workers and scrape
their ``/metrics`` -- one with prometheus_client, one where importing it
fails, whose probes must keep working.
"""

from __future__ import annotations

import math
import sys

import pytest
from testapp import jobs

from awa_django import ops
from awa_django.domain import closures
from awa_django.domain.records import ClaimedJob, PreparedJob
from awa_django.observability import metrics
from awa_django.observability.hooks import QueueSample
from awa_django.observability.prometheus import (
    NOT_INSTALLED,
    PrometheusObserver,
    exposition,
    metric_names,
)
from tests.conftest import wait_for
from tests.observability.probes import (
    WORKER_ENV,
    ProbedWorker,
    metric_families,
    ready,
    sample_value,
)


@pytest.fixture
def observer() -> PrometheusObserver:
    return PrometheusObserver()


def scrape(observer: PrometheusObserver) -> dict:
    body, content_type = exposition(observer.registry)
    assert content_type.startswith("text/plain")
    return metric_families(body.decode())


def attempt(queue: str = "email", kind: str = "app.send", attempt: int = 1) -> ClaimedJob:
    return ClaimedJob(
        job_id=7,
        run_lease=1,
        kind=kind,
        queue=queue,
        priority=2,
        effective_priority=2,
        attempt=attempt,
        max_attempts=3,
        args=[],
        kwargs={},
        metadata={},
        tags=[],
        errors=[],
        progress=None,
        claim_slot=0,
        batch_id=1,
        item=1,
        deadline_at=None,
        claim_nonce=1,
    )


def prepared(queue: str, kind: str) -> PreparedJob:
    return PreparedJob(kind, queue, 2, 3, "[]", "{}", "{}", (), None, None, None)


def test_every_metric_of_the_table_is_declared_under_its_prometheus_name(observer):
    families = scrape(observer)
    kinds = {metrics.COUNTER: "counter", metrics.HISTOGRAM: "histogram", metrics.GAUGE: "gauge"}
    for metric in metrics.ALL:
        name = metrics.prometheus_name(metric)
        family = families[name.removesuffix("_total")]
        assert family.type == kinds[metric.instrument], metric.name
        assert family.documentation == metric.description
    # The names the dashboard test checks against are these.
    assert "awa_job_duration_seconds_bucket" in metric_names()
    assert "awa_job_outcomes_total" in metric_names()
    assert "awa_queue_depth" in metric_names()


def test_closed_attempts_count_outcomes_durations_retries_dead_letters_and_stale(observer):
    job = attempt()
    entry = closures.error_entry(job, None, "boom")
    observer.closed(job, closures.completed(job, None), True, 0.02)
    observer.closed(job, closures.completed(job, None), True, 0.3)
    observer.closed(job, closures.retry_or_fail(job, entry, 5.0, dlq=False), True, 0.1)
    observer.closed(job, closures.failed(job, entry, dlq=True, reason="boom"), True, 0.1)
    observer.closed(job, closures.completed(job, None), False, 0.1)  # rejected: stale

    families = scrape(observer)
    labels = {"queue": "email", "kind": "app.send"}
    assert sample_value(families, "awa_job_outcomes_total", **labels, outcome="completed") == 2
    assert sample_value(families, "awa_job_outcomes_total", **labels, outcome="retryable") == 1
    # A move to the DLQ is a failed attempt, counted again as a DLQ move.
    assert sample_value(families, "awa_job_outcomes_total", **labels, outcome="failed") == 1
    assert sample_value(families, "awa_job_retries_total", **labels) == 1
    assert sample_value(families, "awa_job_dlq_total", **labels) == 1
    assert sample_value(families, "awa_job_stale_completions_total", **labels) == 1
    durations = {"queue": "email", "kind": "app.send", "outcome": "completed"}
    assert sample_value(families, "awa_job_duration_seconds_count", **durations) == 2
    assert sample_value(families, "awa_job_duration_seconds_sum", **durations) == pytest.approx(
        0.32
    )
    assert sample_value(families, "awa_job_duration_seconds_bucket", **durations, le="0.025") == 1
    assert sample_value(families, "awa_job_duration_seconds_bucket", **durations, le="0.5") == 2


def test_claims_count_the_empty_ones_and_time_every_claim(observer):
    observer.claimed("email", 10, 4, 0.002)
    observer.claimed("email", 10, 0, 0.001)
    observer.claimed("email", 10, 0, 0.001)
    families = scrape(observer)
    assert sample_value(families, "awa_dispatch_claims_total", queue="email") == 3
    assert sample_value(families, "awa_dispatch_empty_claim_total", queue="email") == 2
    assert sample_value(families, "awa_dispatch_claimed_total", queue="email") == 4
    assert sample_value(families, "awa_dispatch_claim_duration_seconds_count", queue="email") == 3


def test_enqueues_count_written_jobs_and_skip_unique_duplicates(observer):
    batch = [prepared("email", "app.send")] * 3 + [prepared("reports", "app.build")]
    observer.enqueued(batch, [1, None, 3, 4])
    families = scrape(observer)
    assert sample_value(families, "awa_job_enqueued_total", queue="email", kind="app.send") == 2
    assert sample_value(families, "awa_job_enqueued_total", queue="reports", kind="app.build") == 1


def test_ring_ticks_count_rotate_and_prune_outcomes_and_every_task_is_timed(observer):
    observer.maintained("queue_ring", {"rotate": "rotated", "prune": "pruned"}, 0.01)
    observer.maintained("queue_ring", {"rotate": "skipped_idle", "prune": "already_pruned"}, 0.01)
    observer.maintained("lease_ring", {"rotate": "skipped_busy", "prune": "blocked"}, 0.01)
    observer.maintained("stale_rescue", 0, 0.004)
    observer.rescued("stale_heartbeat", 3)
    families = scrape(observer)
    assert sample_value(families, "awa_maintenance_rotate_total", ring="queue") == 2
    assert sample_value(families, "awa_maintenance_rotate_total", outcome="skipped_busy") == 1
    assert sample_value(families, "awa_maintenance_prune_total", outcome="blocked") == 1
    ticks = "awa_maintenance_task_duration_seconds_count"
    assert sample_value(families, ticks, task="queue_ring") == 2
    assert sample_value(families, ticks, task="stale_rescue") == 1
    assert sample_value(families, "awa_maintenance_rescued_total", reason="stale_heartbeat") == 3


def test_outbox_readings_set_its_gauges(observer):
    observer.outbox_sampled(7, 2.5)
    families = scrape(observer)
    assert sample_value(families, "awa_outbox_pending") == 7
    assert sample_value(families, "awa_outbox_lag_seconds") == 2.5


def test_queue_samples_set_depth_and_lag_and_go_when_leadership_does(observer):
    observer.runtime("leader")
    observer.queues_sampled(
        [QueueSample("email", 12, 3, 2, 4.5), QueueSample("reports", 0, 0, 0, 0.0, paused=True)]
    )
    families = scrape(observer)
    assert sample_value(families, "awa_queue_depth", queue="email", state="available") == 12
    assert sample_value(families, "awa_queue_depth", queue="email", state="scheduled") == 3
    assert sample_value(families, "awa_queue_depth", queue="email", state="running") == 2
    assert sample_value(families, "awa_queue_lag_seconds", queue="email") == 4.5
    assert sample_value(families, "awa_runtime_leader") == 1

    # A queue no longer sampled is dropped, not frozen at its last value.
    observer.queues_sampled([QueueSample("email", 1, 0, 0, 0.5)])
    families = scrape(observer)
    assert sample_value(families, "awa_queue_depth", queue="email", state="available") == 1
    with pytest.raises(KeyError):
        sample_value(families, "awa_queue_lag_seconds", queue="reports")

    # A former leader exports no depths next to the new leader's.
    observer.runtime("follower")
    families = scrape(observer)
    assert sample_value(families, "awa_runtime_leader") == 0
    assert [s for s in families["awa_queue_depth"].samples] == []
    assert [s for s in families["awa_queue_lag_seconds"].samples] == []


def test_runtime_states_drive_up_and_inflight(observer):
    assert sample_value(scrape(observer), "awa_runtime_up") == 0
    observer.runtime("started")
    observer.set_inflight(5)
    families = scrape(observer)
    assert sample_value(families, "awa_runtime_up") == 1
    assert sample_value(families, "awa_runtime_inflight") == 5
    observer.runtime("leader")
    observer.runtime("stopped")
    families = scrape(observer)
    assert (
        sample_value(families, "awa_runtime_up"),
        sample_value(families, "awa_runtime_leader"),
        sample_value(families, "awa_runtime_inflight"),
    ) == (0, 0, 0)


def test_two_observers_do_not_collide():
    # Each has its own registry (not prometheus_client's global one).
    first, second = PrometheusObserver(), PrometheusObserver()
    first.claimed("email", 1, 1, 0.001)
    assert sample_value(scrape(first), "awa_dispatch_claims_total") == 1
    with pytest.raises(KeyError):
        sample_value(scrape(second), "awa_dispatch_claims_total")


def test_without_prometheus_client_the_observer_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    with pytest.raises(ImportError) as raised:
        PrometheusObserver()
    assert str(raised.value) == NOT_INSTALLED
    assert "pip install 'awa-django[prometheus]'" in NOT_INSTALLED


def test_a_nan_is_not_a_value_worth_exporting(observer):
    # Guard for multiprocess mode, where a dropped series is NaN instead:
    # NaN must stay a float the parser accepts.
    observer.queues_sampled([QueueSample("email", 1, 0, 0, math.nan)])
    assert math.isnan(sample_value(scrape(observer), "awa_queue_lag_seconds", queue="email"))


# --- real workers ----------------------------------------------------------------------


# reset_awa comes first: its teardown empties the queue storage, which must
# wait until start_worker's teardown has stopped the worker.
@pytest.mark.django_db(transaction=True)
def test_a_worker_exports_what_its_jobs_did(reset_awa, queue, start_worker):
    for n in range(8):
        jobs.plain.using(queue=queue).enqueue(n)
    jobs.fail_then_succeed.using(queue=queue).enqueue(1)
    jobs.terminal.using(queue=queue).enqueue()
    worker = ProbedWorker(
        start_worker("--queue", queue, "--health-addr", "127.0.0.1:0", env=WORKER_ENV)
    )
    worker.poll("/readyz", ready)
    wait_for(lambda: ops.queue_counts(queue)["completed"] == 9, timeout=60)
    wait_for(lambda: ops.queue_counts(queue)["failed"] == 1, timeout=60)

    def scraped() -> dict:
        answer = worker.get("/metrics")
        assert answer.status == 200
        assert answer.headers["content-type"].startswith("text/plain")
        families = metric_families(answer.body.decode())
        try:
            done = sample_value(families, "awa_job_outcomes_total", queue=queue)
        except KeyError:
            return {}
        return families if done == 11 else {}  # 9 completed, 1 retryable, 1 failed

    families = wait_for(scraped, timeout=30)
    outcome = {"queue": queue}
    assert sample_value(families, "awa_job_outcomes_total", **outcome, outcome="completed") == 9
    assert sample_value(families, "awa_job_outcomes_total", **outcome, outcome="retryable") == 1
    assert sample_value(families, "awa_job_outcomes_total", **outcome, outcome="failed") == 1
    assert sample_value(families, "awa_job_retries_total", **outcome) == 1
    assert sample_value(families, "awa_job_duration_seconds_count", **outcome) == 11
    assert sample_value(families, "awa_dispatch_claimed_total", **outcome) == 11
    assert sample_value(families, "awa_dispatch_claims_total", **outcome) >= 2
    assert sample_value(families, "awa_runtime_up") == 1
    # The process collectors come along (memory, CPU, file descriptors).
    assert sample_value(families, "process_resident_memory_bytes") > 0
    assert worker.get("/metrics", method="HEAD").body == b""


@pytest.mark.django_db(transaction=True)
def test_without_prometheus_client_metrics_is_501_and_the_probes_still_work(
    reset_awa, queue, start_worker, tmp_path
):
    # A prometheus_client that cannot be imported shadows the installed one.
    stub = tmp_path / "prometheus_client"
    stub.mkdir()
    (stub / "__init__.py").write_text('raise ImportError("hidden by the test")\n')
    env = {**WORKER_ENV, "PYTHONPATH": str(tmp_path)}
    worker = ProbedWorker(start_worker("--queue", queue, "--health-addr", "127.0.0.1:0", env=env))
    assert worker.poll("/readyz", ready).json()["status"] == "ok"
    assert worker.get("/healthz").status == 200
    answer = worker.get("/metrics")
    assert answer.status == 501
    assert answer.json() == {"error": NOT_INSTALLED}
    ref = jobs.plain.using(queue=queue).enqueue(1)
    wait_for(lambda: ops.get_job(ref.id).state == "completed", timeout=60)
    assert "/metrics answers 501" in worker.text()
