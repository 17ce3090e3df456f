"""A ``run_at`` past what Python can read back is refused before any write (issue 30, point 5).

PostgreSQL's ``timestamptz`` goes to the year 294276, Python's ``datetime``
to 9999-12-31.  ``datetime.max`` in a zone west of UTC is after 9999-12-31
UTC: it used to be committed, then the enqueue raised reading it back, and
from then on ``ops.browse_jobs()`` and the console's job list failed (500).
``run_at`` is now bounded like ``run_in`` (at most 100 years ahead) on every
path that takes it, and nothing is written.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.urls import reverse
from testapp import tasks
from testapp.jobs import plain as factory_job

import awa_django
from awa_django import InvalidJob, ops
from awa_django.domain.payload import MAX_DELAY_SECONDS

WEST = dt.timezone(dt.timedelta(hours=-5))
EAST = dt.timezone(dt.timedelta(hours=14))
BEYOND = [
    pytest.param(dt.datetime.max.replace(tzinfo=WEST), id="datetime.max-at-UTC-5"),
    pytest.param(dt.datetime(9999, 12, 31, 23, tzinfo=WEST), id="9999-12-31T23-05"),
    pytest.param(dt.datetime.max.replace(tzinfo=dt.UTC), id="datetime.max-UTC"),
    pytest.param(dt.datetime(3000, 1, 1, tzinfo=dt.UTC), id="year-3000"),
    pytest.param(dt.datetime.min.replace(tzinfo=EAST), id="datetime.min-at-UTC+14"),
]


def job_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa.jobs")
        return int(cursor.fetchone()[0])


def assert_nothing_written_and_listings_work(before: int, superuser) -> None:
    assert job_rows() == before
    ops.browse_jobs(limit=50)
    assert superuser.get(reverse("admin:awa_django_job_changelist")).status_code == 200


@pytest.mark.parametrize("run_at", BEYOND)
def test_enqueue_refuses_a_run_at_beyond_the_horizon(committed_db, superuser, queue, run_at):
    before = job_rows()
    with pytest.raises(InvalidJob, match="run_at must be at most"):
        factory_job.using(queue=queue, run_at=run_at).enqueue(1)
    assert_nothing_written_and_listings_work(before, superuser)


@pytest.mark.parametrize("run_at", BEYOND)
def test_enqueue_many_refuses_it_before_the_copy(committed_db, superuser, queue, run_at):
    before = job_rows()
    with pytest.raises(InvalidJob, match="run_at must be at most"):
        awa_django.enqueue_many(
            [factory_job.using(queue=queue).prepare(1), factory_job.using(run_at=run_at).prepare(2)]
        )
    assert_nothing_written_and_listings_work(before, superuser)


@pytest.mark.parametrize("run_at", BEYOND)
def test_the_tasks_backend_refuses_it(committed_db, superuser, run_at):
    before = job_rows()
    with pytest.raises(InvalidJob, match="run_at must be at most"):
        tasks.add.using(run_after=run_at).enqueue(1, 2)
    assert_nothing_written_and_listings_work(before, superuser)


def test_a_naive_run_after_made_aware_in_a_western_zone_is_refused(committed_db, superuser):
    before = job_rows()
    with override_settings(USE_TZ=False, TIME_ZONE="America/New_York"):
        with pytest.raises(InvalidJob, match="run_at must be at most"):
            tasks.add.using(run_after=dt.datetime.max).enqueue(1, 2)
    assert_nothing_written_and_listings_work(before, superuser)


def test_the_horizon_is_the_one_of_run_in(committed_db, queue):
    latest = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=MAX_DELAY_SECONDS - 60)
    ref = factory_job.using(queue=queue, run_at=latest).enqueue(1)
    assert ops.get_job(ref.id).run_at == latest
    ref = factory_job.using(queue=queue, run_at=dt.datetime(1970, 1, 1, tzinfo=WEST)).enqueue(1)
    assert ops.get_job(ref.id).state == "available"  # a past run_at: due now
    with pytest.raises(InvalidJob, match="run_in must be at most"):
        factory_job.using(run_in=MAX_DELAY_SECONDS + 1)


@pytest.fixture
def committed_db(transactional_db, reset_awa):
    """Autocommit, as in production: a write that is not refused is committed."""
    assert settings.AWA is not None
