"""The signals how-to's receivers and logging configuration, for real."""

from __future__ import annotations

import io
import json
import logging
import logging.config

import django
import pytest
from django.core import mail
from django.test import override_settings
from testapp import jobs

from docs.examples import signals as example
from tests.conftest import run_burst

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


@pytest.fixture
def receivers():
    example.connect_receivers()
    yield
    example.disconnect_receivers()


# Django 6.0 deprecates the (name, address) pairs 5.2 requires.
ADMINS = ["ops@example.com"] if django.VERSION >= (6, 0) else [("Ops", "ops@example.com")]


@override_settings(ADMINS=ADMINS)
def test_a_dead_letter_mails_the_admins(queue, receivers):
    ref = jobs.fails_until_released.using(queue=queue).enqueue()

    with override_settings(AWA={"QUEUE_DLQ": {queue: True}}):
        run_burst(queue)

    (message,) = mail.outbox
    assert message.subject.endswith(
        f"job {ref.id} (testapp.fails_until_released) is in the dead-letter queue"
    )
    assert "not fixed yet" in message.body and f"awa_dlq retry {ref.id}" in message.body


def test_the_logging_example_writes_json_lines(queue):
    # Build the example's formatter the way dictConfig does, without
    # reconfiguring the test process's logging.
    configurator = logging.config.DictConfigurator(example.LOGGING)
    formatter = configurator.configure_formatter(example.LOGGING["formatters"]["json"])
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    handler.setLevel(example.LOGGING["loggers"]["awa_django.jobs"]["level"])
    logger = logging.getLogger("awa_django.jobs")
    level = logger.level
    logger.setLevel(handler.level)
    logger.addHandler(handler)
    try:
        ref = jobs.terminal.using(queue=queue).enqueue()
        jobs.plain.using(queue=queue).enqueue(1)  # a completion: DEBUG, not written
        run_burst(queue)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)

    (line,) = stream.getvalue().splitlines()
    document = json.loads(line)
    assert (document["job_id"], document["level"]) == (ref.id, "INFO")
    assert "card declined" in document["error"]
