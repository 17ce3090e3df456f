"""Celery adapter (Redis broker): apply_async over one producer, `celery worker` (prefork)."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))

import benchlib  # noqa: E402

POOL = "prefork"
CONCURRENCY = os.cpu_count() or 2  # prefork children: one per core, as Celery's default


def describe():
    import redis
    from bench_celery import app

    server = redis.Redis.from_url(app.conf.broker_url).info("server")
    return {
        "redis_version": server.get("redis_version"),
        "concurrency": f"1 worker, --pool {POOL} --concurrency {CONCURRENCY}, "
        f"prefetch multiplier {app.conf.worker_prefetch_multiplier}",
        "config": "Redis broker 127.0.0.1:6379, no result backend (task_ignore_result), "
        "early ack (default), --without-gossip --without-mingle --without-heartbeat",
        "bulk_path": "task.apply_async() loop over one acquired producer connection",
        "single_path": "task.apply_async((t,)) per job",
    }


def install():
    pass  # nothing to create: Redis keys appear on first publish


def enqueue_bulk(n):
    from bench_celery import app, noop

    with app.producer_pool.acquire(block=True) as producer:
        producer.connection.ensure_connection()  # connect before the clock starts

        def run():
            for _ in range(n):
                noop.apply_async((0.0,), producer=producer)

        return benchlib.timed(run)


def produce(rate, duration):
    from bench_celery import noop

    noop.apply_async((0.0,))  # connect before the clock starts
    return benchlib.produce(rate, duration, lambda t: noop.apply_async((t,)))


def probe():
    from bench_celery import noop

    noop.apply_async((benchlib.PROBE,))


def counts():
    from bench_celery import QUEUE, app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        client = channel.client  # adds global_keyprefix to every key by itself
        waiting = client.llen(QUEUE)
        unacked = client.hlen(channel.unacked_key)  # prefetched by the worker, not yet acked
    return {
        "pending": waiting + unacked,
        "done": None,
        "raw": {"queued": waiting, "unacked": unacked},
    }


def cleanup():
    import redis
    from bench_celery import app

    client = redis.Redis.from_url(app.conf.broker_url)
    prefix = app.conf.broker_transport_options["global_keyprefix"]
    keys = list(client.scan_iter(match=prefix + "*", count=1000))
    if keys:
        client.delete(*keys)


def worker_argv(burst):
    if burst:
        pass  # Celery has no burst mode: the driver polls `counts` and stops the worker
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "bench_celery",
        "worker",
        "-Q",
        "bench",
        "--pool",
        POOL,
        "--concurrency",
        str(CONCURRENCY),
        "--loglevel",
        "WARNING",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def worker_env():
    return {"PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}


if __name__ == "__main__":
    benchlib.main(
        describe=describe,
        install=install,
        enqueue_bulk=enqueue_bulk,
        produce=produce,
        probe=probe,
        counts=counts,
        worker_argv=worker_argv,
        worker_env=worker_env,
        cleanup=cleanup,
    )
