"""The atomic-handlers how-to (run by tests/beyond/test_atomic.py).

``activate_account`` changes a row and queues the welcome email in the same
transaction that records the job as completed.
"""

from __future__ import annotations

from django.contrib.auth.models import User

from awa_django import job

from .signup import send_welcome_email


class NotReadyError(Exception):
    pass


# [atomic]
@job(queue="accounts", atomic=True)
def activate_account(user_id: int) -> str:
    user = User.objects.select_for_update().get(pk=user_id)
    user.is_active = True
    user.save(update_fields=["is_active"])
    if not user.email:
        # Rolls the save back; the job is retried later.
        raise NotReadyError(f"user {user.pk} has no email address yet")
    # Joins the handler's transaction: queued only if this attempt completes
    # (and enqueued last, so its lane is held only for the commit).
    send_welcome_email.enqueue(user.pk)
    return user.username


# [/atomic]
