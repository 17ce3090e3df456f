"""The tutorial's test: uses the ``awa`` pytest fixture of awa_django's plugin."""

from __future__ import annotations

from .signup import send_welcome_email, sign_up


# [test]
def test_sign_up_enqueues_the_welcome_email(awa):
    user, _ = sign_up("ada", "ada@example.com")
    awa.assert_enqueued(send_welcome_email, args=[user.pk], queue="email")


# [/test]
