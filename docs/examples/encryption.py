"""Encrypted job arguments (the encryption how-to; run by the test suite)."""

from __future__ import annotations

# [declare]
from django.core.mail import send_mail

from awa_django import job


@job(queue="default", encrypt=True)
def send_password_reset(email: str, token: str) -> str:
    """Mail a password-reset link: the address and the token never reach PostgreSQL in clear."""
    send_mail(
        "Reset your password",
        f"https://example.com/reset/{token}",
        "noreply@example.com",
        [email],
    )
    return f"sent to {email}"


# [/declare]

# [read]
from awa_django import ops  # noqa: E402 - the how-to shows this part on its own


def show_reset_job(job_id: int, operator: str) -> dict:
    """What a support tool shows of a reset job: sealed for everyone, then
    opened for one named operator (an audited read)."""
    stored = ops.get_job(job_id)
    opened = ops.decrypt_job(job_id, actor=operator)
    return {"stored": stored.args, "opened": opened.args, "result": opened.return_value}


# [/read]
