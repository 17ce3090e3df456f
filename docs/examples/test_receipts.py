"""The Django Tasks how-to's test: tasks run through ``drain()`` like jobs."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.core import mail

from .receipts import pay, receipt_status, send_receipt


# [test]
def test_paying_sends_a_receipt(awa):
    user = User.objects.create_user("ada", "ada@example.com")
    result_id = pay(user, "12.00 EUR")
    awa.assert_enqueued(send_receipt, args=[user.pk, "12.00 EUR"], queue="email")
    assert receipt_status(result_id) == "READY"

    assert awa.drain("email")["completed"] == 1

    result = send_receipt.get_result(result_id)
    assert (result.status, result.return_value) == ("SUCCESSFUL", "ada@example.com")
    assert [m.subject for m in mail.outbox] == ["Your receipt"]


# [/test]
