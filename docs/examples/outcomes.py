"""A handler that steers its own outcome (the retries how-to; run by the test suite)."""

from __future__ import annotations

import smtplib

from django.contrib.auth.models import User

from awa_django import Cancel, JobContext, RetryAfter, Snooze, TerminalError, job


# [outcomes]
@job(queue="email", takes_context=True, max_attempts=8)
def deliver_welcome_email(ctx: JobContext, user_id: int) -> str:
    user = User.objects.filter(pk=user_id).first()
    if user is None:
        raise Cancel(f"user {user_id} was deleted")  # cancelled, no retry
    if not user.email:
        raise TerminalError(f"user {user_id} has no address")  # failed now (or DLQ)
    if not user.is_active:
        raise Snooze(3600)  # run again in an hour; not an attempt
    try:
        user.email_user("Welcome!", f"Hello {user.username}!")
    except (smtplib.SMTPException, OSError) as exc:
        # Counts an attempt; after the 8th the job fails.
        raise RetryAfter(60, f"mail server unavailable: {exc}") from exc
    return f"sent on attempt {ctx.attempt}"


# [/outcomes]
