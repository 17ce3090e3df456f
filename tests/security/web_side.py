"""What the web app does with awa, run by ``manage.py shell`` as the web role.

``main(queue)`` enqueues through every producer path (one job, a
scheduled one, a unique one, ``enqueue_many``'s COPY, a rolled-back one,
Django's Tasks API), reads through the operator API and runs the operator
actions the console offers, then prints one JSON document of what it saw.
Run against a database whose ``DATABASE_URL`` user is the web login role,
it shows that role can do all of it.
"""

from __future__ import annotations

import json
import sys

from django.db import transaction


def main(queue: str) -> None:
    from testapp import tasks
    from testapp.jobs import plain

    from awa_django import Unique, enqueue_many, ops

    job = plain.using(queue=queue)
    report: dict = {}
    report["single"] = job.enqueue(1, 2).id
    report["scheduled"] = plain.using(queue=queue, run_in=3600).enqueue(3).id
    report["unique"] = plain.using(queue=queue, unique=Unique(by_args=True)).enqueue(9).id
    report["many"] = enqueue_many([job.prepare(n) for n in range(5)])
    try:
        with transaction.atomic():
            job.enqueue(100)
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    report["task"] = tasks.add.using(queue_name=queue).enqueue(2, 3).id

    report["get_job"] = ops.get_job(report["single"]).state
    report["listed"] = len(ops.list_jobs(queue=queue, limit=100))
    report["browsed"] = len(ops.browse_jobs(queue=queue).jobs)
    report["counts"] = ops.queue_counts(queue)
    report["queues"] = [info.name for info in ops.list_queues()]
    report["dlq"] = ops.dlq_count()
    report["runtimes"] = len(ops.list_runtimes())
    report["paused"] = ops.pause_queue(queue, actor="web-operator")
    report["resumed"] = ops.resume_queue(queue, actor="web-operator")
    report["audited"] = [entry.action for entry in ops.audit_log(queue=queue)]
    report["cancelled"] = ops.cancel_job(report["many"][0])
    report["retried"] = ops.retry_job(report["many"][0])
    report["override"] = ops.set_queue_override(queue, claim_batch_size=7)
    report["override_cleared"] = ops.clear_queue_override(queue)
    report["preview"] = ops.preview_batch_operation(
        "set_priority", {"queue": queue}, {"priority": 1}
    )
    report["batch"] = ops.submit_batch_operation(
        "set_priority", {"queue": queue}, {"priority": 1}
    ).total
    report["drained"] = ops.drain_queue(f"{queue}-other")
    report["states"] = ops.state_counts().get(queue, {})
    sys.stdout.write(json.dumps(report, default=str) + "\n")
