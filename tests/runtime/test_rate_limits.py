"""Rate limits hold: per process, and across a fleet of worker processes."""

from __future__ import annotations

import json

import pytest
from testapp.jobs import record
from testapp.models import Execution

from awa_django import InvalidJob, ops
from awa_django.conf import parse_settings

# Asserts on time: one xdist process runs the "timing" modules in turn.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("timing")]

RATE = 20.0  # jobs per second
JOBS = 60
# A bucket of one loses every token a claim comes late for (it cannot hold a
# second), so on a loaded machine the lateness of each claim -- a sleep
# overshooting, a round trip to the shared bucket -- lowered the rate the
# workers reached below the limit's.  A bucket of four absorbs that
# lateness; the starts it lets through at once are left out of the reading.
BURST = 4


def observed_rate(queue: str) -> float:
    """Jobs per second from the end of the opening burst to the last claim.

    The limiter spends its tokens on claims, so the claims are what it
    bounds: each job's ``attempted_at`` is its claim's timestamp on the
    server.  The handler's own start is not: it comes a thread hand-off (and,
    for a thread's first job, a new database connection) later, and on a
    loaded machine the first starts of a run, late, bunched up and made the
    rate read above the limit that was in fact kept.  The bucket starts full:
    its first ``BURST`` claims may share one moment, the next ones come a
    token at a time."""
    claims = sorted(job.attempted_at for job in ops.list_jobs(queue=queue, limit=JOBS + 1))
    assert len(claims) == JOBS
    labels = [f"{queue}-{n}" for n in range(JOBS)]
    assert Execution.objects.filter(label__in=labels).count() == JOBS  # each one ran
    return (JOBS - BURST) / (claims[-1] - claims[BURST - 1]).total_seconds()


def run_workers(start_worker, queue: str, scope: str, processes: int) -> float:
    for n in range(JOBS):
        record.using(queue=queue).enqueue(f"{queue}-{n}")
    policy = {"max_workers": 4, "rate_limit": [RATE, BURST], "rate_limit_scope": scope}
    env = {"AWA_SETTINGS_JSON": json.dumps({"QUEUES": {queue: policy}})}
    workers = [
        start_worker("--queue", queue, "--burst", "--no-maintenance", env=env)
        for _ in range(processes)
    ]
    for worker in workers:
        assert worker.wait(timeout=120) == 0, worker.output()
    assert ops.queue_counts(queue)["completed"] == JOBS
    return observed_rate(queue)


def test_a_process_rate_limit_bounds_one_worker(queue, start_worker, reset_awa):
    rate = run_workers(start_worker, queue, "process", 1)
    assert RATE * 0.8 <= rate <= RATE * 1.2, rate


def test_a_fleet_rate_limit_bounds_two_workers_together(queue, start_worker, reset_awa):
    rate = run_workers(start_worker, queue, "fleet", 2)
    assert RATE * 0.8 <= rate <= RATE * 1.2, rate


def test_the_scope_is_validated():
    _, problems = parse_settings({"QUEUES": {"q": {"rate_limit_scope": "cluster"}}})
    assert [p.message for p in problems] == ['expected "process" or "fleet", got \'cluster\'']
    with pytest.raises(InvalidJob):
        ops.set_queue_override("q", rate_limit_scope="fleet")  # not a live-tunable key
