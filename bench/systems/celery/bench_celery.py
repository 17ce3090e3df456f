"""The Celery app (Redis broker, no result backend) and its no-op task."""

import os

import benchlib
from celery import Celery

QUEUE = "bench"

app = Celery("bench_celery", broker=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
app.conf.update(
    task_default_queue=QUEUE,
    task_ignore_result=True,  # no result backend: fire-and-forget no-ops
    worker_prefetch_multiplier=int(os.environ.get("BENCH_CELERY_PREFETCH", "16")),
    broker_connection_retry_on_startup=True,
    # Every key of this run carries the run's prefix, so cleanup removes only them.
    broker_transport_options={"global_keyprefix": os.environ.get("BENCH_REDIS_PREFIX", "bench:")},
)


@app.task(name="noop")
def noop(t: float = 0.0) -> None:
    benchlib.record(t)
