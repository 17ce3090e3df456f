"""pytest plugin (entry point ``pytest11``): the ``awa`` fixture.

``awa`` gives a test the helpers of :mod:`awa_django.testing` bound to the
test's database access (it requests pytest-django's ``db`` fixture, which
gives way to ``transactional_db`` when the test asks for that): ``drain``,
``enqueued_jobs``, ``assert_enqueued``, ``refute_enqueued`` and
``freeze_clock`` (every clock it started is stopped when the test ends).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from . import assert_enqueued, drain, enqueued_jobs, refute_enqueued
from .clock import FrozenClock


class AwaTestHelper:
    """The helpers of :mod:`awa_django.testing` as attributes of one object."""

    drain = staticmethod(drain)
    enqueued_jobs = staticmethod(enqueued_jobs)
    assert_enqueued = staticmethod(assert_enqueued)
    refute_enqueued = staticmethod(refute_enqueued)

    def __init__(self) -> None:
        self._clocks: list[FrozenClock] = []

    def freeze_clock(self, at: dt.datetime | None = None) -> FrozenClock:
        """A running :class:`~awa_django.testing.FrozenClock`, stopped when the test ends."""
        frozen = FrozenClock(at).start()
        self._clocks.append(frozen)
        return frozen

    def close(self) -> None:
        """Stop the clocks this helper started, newest first."""
        while self._clocks:
            self._clocks.pop().stop()


@pytest.fixture
def awa(db: None) -> Iterator[AwaTestHelper]:
    helper = AwaTestHelper()
    yield helper
    helper.close()
