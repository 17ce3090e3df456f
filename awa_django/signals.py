"""Django signals for a job's life, sent by the process that saw the step.

Each signal's ``sender`` is the job's ``@job`` definition
(``None`` when the sending process does not know the kind), so a receiver
can listen to one kind::

    @receiver(job_failed, sender=send_welcome)
    def page_someone(sender, job_id, error, **kwargs): ...

Every signal passes ``job_id``, ``kind`` and ``queue``; the worker's ones
also ``attempt`` and ``run_lease``, and those sent after the attempt closed
``outcome`` (the closure label) and ``duration`` (seconds from the start of
the handler until the outcome was durable).

* ``job_enqueued`` -- in the producer, after the write (in the
  caller's transaction: it may still roll back).
* ``job_started`` -- in the worker, on the handler's thread just before
  the handler runs (for an async handler, on the event loop: do not block).
* ``job_completed``, ``job_retried``, ``job_failed`` (terminal,
  with ``error``), ``job_cancelled``, ``job_dlq`` (failed into the
  dead-letter queue, with ``error``) -- in the worker once the outcome is
  durable, on one delivery thread of their own, in order; receivers may use
  the ORM and never delay the worker's event loop.
* ``jobs_rescued`` -- in the maintenance leader, with ``reason``
  (``stale_heartbeat``, ``deadline_expired``, ``callback_timeout``) and
  ``count``; ``sender`` is None.

No receiver connected, no cost beyond one test per job.  A receiver that
raises is logged (logger ``awa_django.signals``) and never fails the job.
"""

from __future__ import annotations

from django.dispatch import Signal

job_enqueued = Signal()
job_started = Signal()
job_completed = Signal()
job_retried = Signal()
job_failed = Signal()
job_cancelled = Signal()
job_dlq = Signal()
jobs_rescued = Signal()

__all__ = [
    "job_cancelled",
    "job_completed",
    "job_dlq",
    "job_enqueued",
    "job_failed",
    "job_retried",
    "job_started",
    "jobs_rescued",
]
