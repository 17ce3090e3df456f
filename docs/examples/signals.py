"""The receivers of the signals how-to (run by tests/observability/test_docs_signals.py)."""

from __future__ import annotations

from django.core.mail import mail_admins

from awa_django.signals import job_dlq, jobs_rescued


# [receivers]
def tell_the_admins(sender, job_id, kind, queue, error, **kwargs):
    """A job failed into the dead-letter queue: someone has to decide."""
    mail_admins(
        f"job {job_id} ({kind}) is in the dead-letter queue",
        f"Queue {queue}, last error: {error}\nRetry it with: manage.py awa_dlq retry {job_id}",
    )


def count_rescues(sender, reason, count, **kwargs):
    """Workers died or overran their deadline: worth a look if it keeps happening."""
    RESCUES[reason] = RESCUES.get(reason, 0) + count


RESCUES: dict[str, int] = {}


def connect_receivers():
    """Call from your AppConfig.ready()."""
    job_dlq.connect(tell_the_admins, dispatch_uid="tell-the-admins")
    jobs_rescued.connect(count_rescues, dispatch_uid="count-rescues")


# [/receivers]


def disconnect_receivers():
    job_dlq.disconnect(dispatch_uid="tell-the-admins")
    jobs_rescued.disconnect(dispatch_uid="count-rescues")


# [logging]
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "awa_django.observability.logs.JSONFormatter"},
    },
    "handlers": {
        "stdout": {"class": "logging.StreamHandler", "formatter": "json"},
    },
    "loggers": {
        # INFO: failures, cancellations, DLQ moves, rescues. DEBUG adds completions.
        "awa_django.jobs": {"handlers": ["stdout"], "level": "INFO", "propagate": False},
    },
}
# [/logging]
