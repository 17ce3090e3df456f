"""The Django Tasks how-to's code (run by tests/testing/test_docs_examples.py).

``@task`` comes from ``django.tasks`` on Django 6 and from the django-tasks
backport on Django 5.2; the code is the same.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

# [settings]
TASKS = {
    "default": {
        "BACKEND": "awa_django.tasks.AwaBackend",
        "QUEUES": ["default", "email"],  # leave out (or []) to allow any queue
        "OPTIONS": {"max_attempts": 5},
    }
}
# [/settings]

# [task]
try:
    from django.tasks import task  # Django 6
except ImportError:
    from django_tasks import task  # Django 5.2: the django-tasks backport


@task(queue_name="email", priority=10)
def send_receipt(user_id: int, amount: str) -> str:
    user = User.objects.get(pk=user_id)
    user.email_user("Your receipt", f"We received {amount}. Thank you!")
    return user.email


# [/task]


# [enqueue]
def pay(user: User, amount: str) -> str:
    with transaction.atomic():
        # ... record the payment ...
        result = send_receipt.enqueue(user.pk, amount)  # commits or rolls back with it
    return result.id  # the awa job id, as a string


# [/enqueue]


# [result]
def receipt_status(result_id: str) -> str:
    result = send_receipt.get_result(result_id)
    if result.is_finished and result.errors:
        last = result.errors[-1]
        return f"{result.status}: {last.exception_class_path}"
    return str(result.status)


# [/result]
