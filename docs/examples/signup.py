"""The tutorial's job and the code that enqueues it (run by tests/django/test_docs_examples.py).

In a project the job lives in an app's ``jobs.py`` (imported automatically)
and ``sign_up`` in a view or a service module.  The ``# [name]`` comments
mark the parts the documentation pages include.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from awa_django import EnqueuedJob, job


# [job]
@job(queue="email", max_attempts=10)
def send_welcome_email(user_id: int) -> str:
    user = User.objects.get(pk=user_id)
    user.email_user("Welcome!", f"Hello {user.username}, thanks for signing up.")
    return user.email


# [/job]


# [enqueue]
def sign_up(username: str, email: str) -> tuple[User, EnqueuedJob]:
    with transaction.atomic():
        user = User.objects.create_user(username, email)
        ref = send_welcome_email.enqueue(user.pk)  # commits or rolls back with the user
    return user, ref


# [/enqueue]
