"""The jobs of the testing how-to (run by tests/testing/test_docs_examples.py).

A welcome email when a user signs up, and a nudge three days later unless
the user has logged in since.
"""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.models import User

from awa_django import job


# [jobs]
@job(queue="email")
def welcome(user_id: int) -> str:
    user = User.objects.get(pk=user_id)
    user.email_user("Welcome!", f"Hello {user.username}, thanks for signing up.")
    nudge.using(run_in=dt.timedelta(days=3)).enqueue(user_id)
    return user.email


@job(queue="email")
def nudge(user_id: int) -> bool:
    user = User.objects.get(pk=user_id)
    if user.last_login is not None:
        return False
    user.email_user("Still there?", "Your account is waiting for you.")
    return True


# [/jobs]
