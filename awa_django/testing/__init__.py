"""The test kit: check what code enqueued, and run jobs without a worker process.

* :func:`enqueued_jobs` / :func:`assert_enqueued` / :func:`refute_enqueued`
  look at jobs waiting to run ("enqueued" = available, scheduled or waiting on
  dependencies);
* :func:`drain` runs ready jobs inline in the test's thread, through the
  worker's own claim and close (the outcome table of a real worker);
* :class:`FrozenClock` (:func:`freeze_clock`) makes scheduled jobs due
  when the test says;
* :class:`AwaTestCaseMixin` offers them to a Django ``TestCase``, the
  ``awa`` pytest fixture (:mod:`.pytest_plugin`) to pytest tests.

Everything runs on Django's connection, so inside a test's transaction it
sees the test's own uncommitted jobs.
"""

from __future__ import annotations

from .clock import FrozenClock, freeze_clock
from .drain import OUTCOMES, drain
from .enqueued import JobOrKind, assert_enqueued, enqueued_jobs, refute_enqueued
from .mixin import AwaTestCaseMixin

__all__ = [
    "OUTCOMES",
    "AwaTestCaseMixin",
    "FrozenClock",
    "JobOrKind",
    "assert_enqueued",
    "drain",
    "enqueued_jobs",
    "freeze_clock",
    "refute_enqueued",
]
