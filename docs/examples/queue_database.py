"""A queue in a database of its own (the queue-database how-to; run by the test suite).

The code is the same as in the application's own database: outbox mode is a
matter of settings.  The ``# [name]`` comments mark the parts the page includes.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from awa_django import EnqueuedJob, job


# [job]
@job(queue="email", max_attempts=10)
def send_activation(user_id: int) -> str:
    user = User.objects.get(pk=user_id)
    user.email_user("Activate your account", f"Hello {user.username}, one more step.")
    return user.email


# [/job]


# [enqueue]
def register(username: str, email: str, *, fail_after: bool = False) -> EnqueuedJob:
    """Create the user and its activation mail in one transaction of the
    application's database: both or neither."""
    with transaction.atomic():
        user = User.objects.create_user(username, email)
        ref = send_activation.enqueue(user.pk)  # state "pending": in the outbox
        if fail_after:
            raise RuntimeError("payment declined")  # rolls back the user and the job
    return ref


# [/enqueue]
