"""``AwaTestCaseMixin``: the test kit as methods of a Django test case."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from . import enqueued
from .clock import FrozenClock
from .drain import drain

if TYPE_CHECKING:
    from ..domain.records import JobInfo
    from .enqueued import JobOrKind


class AwaTestCaseMixin:
    """Mix into a ``TestCase`` (or ``TransactionTestCase``) for ``self.drain()``,
    ``self.assert_enqueued()``, ``self.refute_enqueued()``, ``self.enqueued_jobs()``
    and ``self.freeze_clock()`` (stopped when the test ends)::

        class SignupTests(AwaTestCaseMixin, TestCase):
            def test_welcome_email(self):
                sign_up("ada", "ada@example.com")
                self.assert_enqueued(send_welcome_email, queue="email")
                self.assertEqual(self.drain()["completed"], 1)
    """

    #: The database alias the helpers use (None: ``AWA["DATABASE"]``).
    awa_database: str | None = None

    if TYPE_CHECKING:

        def addCleanup(self, function: Any, /, *args: Any, **kwargs: Any) -> None: ...  # noqa: N802

    def drain(
        self, queue: str | None = None, *, with_recursion: bool = True, limit: int | None = None
    ) -> dict[str, int]:
        """:func:`awa_django.testing.drain` on :attr:`awa_database`."""
        return drain(queue, with_recursion=with_recursion, limit=limit, database=self.awa_database)

    def enqueued_jobs(
        self,
        job_or_kind: JobOrKind = None,
        args: list[Any] | tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
    ) -> list[JobInfo]:
        """:func:`awa_django.testing.enqueued_jobs`."""
        return enqueued.enqueued_jobs(job_or_kind, args, kwargs, queue, database=self.awa_database)

    def assert_enqueued(
        self,
        job_or_kind: JobOrKind = None,
        args: list[Any] | tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
    ) -> list[JobInfo]:
        """:func:`awa_django.testing.assert_enqueued`."""
        return enqueued.assert_enqueued(
            job_or_kind, args, kwargs, queue, database=self.awa_database
        )

    def refute_enqueued(
        self,
        job_or_kind: JobOrKind = None,
        args: list[Any] | tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
    ) -> None:
        """:func:`awa_django.testing.refute_enqueued`."""
        enqueued.refute_enqueued(job_or_kind, args, kwargs, queue, database=self.awa_database)

    def freeze_clock(self, at: dt.datetime | None = None) -> FrozenClock:
        """A running :class:`~awa_django.testing.FrozenClock`, stopped when the test ends."""
        frozen = FrozenClock(at).start()
        self.addCleanup(frozen.stop)
        return frozen
