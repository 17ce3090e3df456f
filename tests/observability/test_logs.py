"""One structured log line per state change, from a real in-process worker."""

from __future__ import annotations

import json
import logging

import pytest
from django.test import override_settings
from testapp import jobs

from awa_django.observability.logs import JSONFormatter
from tests.conftest import run_burst

pytestmark = pytest.mark.django_db(transaction=True)

LOGGER = "awa_django.jobs"


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def job_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER]


def test_failures_are_info_completions_debug_each_with_the_attempt_fields(queue, caplog):
    done = jobs.plain.using(queue=queue).enqueue(1)
    flaky = jobs.fail_then_succeed.using(queue=queue).enqueue(1)
    failed = jobs.terminal.using(queue=queue).enqueue()

    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        run_burst(queue)

    by_job: dict[int, list[logging.LogRecord]] = {}
    for record in job_records(caplog):
        by_job.setdefault(record.awa["job_id"], []).append(record)
    (completion,) = by_job[done.id]
    assert completion.levelno == logging.DEBUG
    assert completion.awa["outcome"] == "completed" and completion.awa["duration"] > 0
    assert set(completion.awa) >= {"job_id", "kind", "queue", "attempt", "run_lease", "duration"}
    retry, success = by_job[flaky.id]
    assert (retry.levelno, retry.awa["attempt"], retry.awa["outcome"]) == (
        logging.INFO,
        1,
        "retryable",
    )
    assert "error" in retry.awa and "will retry" in retry.getMessage()
    assert (success.levelno, success.awa["attempt"]) == (logging.DEBUG, 2)
    (failure,) = by_job[failed.id]
    assert failure.levelno == logging.INFO
    assert "card declined" in failure.awa["error"] and "card declined" in failure.getMessage()


def test_at_info_only_what_an_operator_acts_on_is_logged(queue, caplog):
    jobs.plain.using(queue=queue).enqueue(1)
    failed = jobs.terminal.using(queue=queue).enqueue()

    with caplog.at_level(logging.INFO, logger=LOGGER):
        run_burst(queue)

    assert [r.awa["job_id"] for r in job_records(caplog)] == [failed.id]


def test_payloads_are_left_out_unless_asked_for(queue, caplog):
    jobs.plain.using(queue=queue).enqueue(7, b=35)
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        run_burst(queue)
    (plain,) = job_records(caplog)
    assert "args" not in plain.awa and "kwargs" not in plain.awa

    caplog.clear()
    jobs.plain.using(queue=queue).enqueue(7, b=35)
    with (
        override_settings(AWA={"LOG_PAYLOADS": True}),
        caplog.at_level(logging.DEBUG, logger=LOGGER),
    ):
        run_burst(queue)
    (plain,) = job_records(caplog)
    assert (plain.awa["args"], plain.awa["kwargs"]) == ([7], {"b": 35})


def test_json_formatter_writes_one_object_with_the_fields(queue, caplog):
    failed = jobs.terminal.using(queue=queue).enqueue()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        run_burst(queue)
    (record,) = job_records(caplog)

    line = JSONFormatter().format(record)

    assert "\n" not in line
    document = json.loads(line)
    assert document["level"] == "INFO" and document["logger"] == LOGGER
    assert (document["job_id"], document["kind"], document["attempt"]) == (
        failed.id,
        "testapp.terminal",
        1,
    )
    assert document["message"] == record.getMessage()
    assert document["time"].endswith("+00:00")
