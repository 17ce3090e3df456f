"""pytest plugin (entry point ``pytest11``): the ``awa`` fixture.

``awa`` gives a test the helpers of :mod:`awa_django.testing` bound to the
test's database access (it requests pytest-django's ``db`` fixture).
"""

from __future__ import annotations

import pytest

from . import assert_enqueued, enqueued_jobs, refute_enqueued


class AwaTestHelper:
    """The helpers of :mod:`awa_django.testing` as attributes of one object."""

    enqueued_jobs = staticmethod(enqueued_jobs)
    assert_enqueued = staticmethod(assert_enqueued)
    refute_enqueued = staticmethod(refute_enqueued)


@pytest.fixture
def awa(db: None) -> AwaTestHelper:
    return AwaTestHelper()
