"""The examples of the testing and Django Tasks how-to pages, run against PostgreSQL.

The pages include docs/examples/{welcome,test_welcome,receipts,test_receipts}.py;
their tests are collected here.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from awa_django.tasks import AwaBackend
from docs.examples import receipts
from docs.examples.test_receipts import test_paying_sends_a_receipt  # noqa: F401
from docs.examples.test_welcome import NudgeTests, test_welcome_then_nudge  # noqa: F401
from tests.django.test_docs_examples import LOCMEM


@pytest.fixture(autouse=True)
def _locmem_mail():
    """Django's locmem mail backend, configured the way each Django version expects."""
    with override_settings(**LOCMEM):
        yield


def test_the_settings_of_the_tasks_page_pass_the_checks():
    backend = AwaBackend("default", receipts.TASKS["default"])
    assert backend.check() == []
    assert backend.awa_options["max_attempts"] == 5
    assert backend.queues == {"default", "email"}
