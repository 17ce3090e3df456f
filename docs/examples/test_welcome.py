"""The testing how-to's tests: the ``awa`` pytest fixture and the TestCase mixin."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.models import User
from django.core import mail
from django.test import TestCase
from django.utils import timezone

from awa_django.testing import AwaTestCaseMixin

from .welcome import nudge, welcome


# [pytest]
def test_welcome_then_nudge(awa):
    clock = awa.freeze_clock()
    user = User.objects.create_user("ada", "ada@example.com")
    welcome.enqueue(user.pk)

    assert awa.drain("email")["completed"] == 1  # welcome ran; the nudge is not due
    assert [m.subject for m in mail.outbox] == ["Welcome!"]
    awa.assert_enqueued(nudge, args=[user.pk], queue="email")

    clock.advance(dt.timedelta(days=3))
    assert awa.drain("email")["completed"] == 1
    assert [m.subject for m in mail.outbox] == ["Welcome!", "Still there?"]


# [/pytest]


# [testcase]
class NudgeTests(AwaTestCaseMixin, TestCase):
    def test_no_nudge_after_a_login(self):
        clock = self.freeze_clock()
        user = User.objects.create_user("bob", "bob@example.com")
        welcome.enqueue(user.pk)
        self.drain("email")
        User.objects.filter(pk=user.pk).update(last_login=timezone.now())

        clock.advance(dt.timedelta(days=3))
        self.assertEqual(self.drain("email")["completed"], 1)  # the nudge ran...
        self.assertEqual(len(mail.outbox), 1)  # ...and sent nothing
        self.refute_enqueued(nudge)


# [/testcase]
