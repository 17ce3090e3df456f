"""procrastinate adapter: batch_defer_async, defer_async, `procrastinate worker`."""

import asyncio
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))

import benchlib  # noqa: E402

CONCURRENCY = 64


def describe():
    return {
        "concurrency": f"1 process, async worker --concurrency {CONCURRENCY}",
        "config": "PsycopgConnector (psycopg pool), LISTEN/NOTIFY on (default), "
        "finished jobs kept (default delete_jobs=never)",
        "bulk_path": "task.batch_defer_async(*kwargs) (one statement)",
        "single_path": "task.defer_async(t=...) (one transaction per job)",
    }


def run(coro_factory):
    from bench_tasks import app

    async def main():
        async with app.open_async():
            return await coro_factory()

    return asyncio.run(main())


def install():
    from bench_tasks import app

    async def main():
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(main())


def enqueue_bulk(n):
    from bench_tasks import noop

    async def bulk():
        started = asyncio.get_running_loop().time()
        await noop.batch_defer_async(*({"t": 0.0} for _ in range(n)))
        return asyncio.get_running_loop().time() - started

    return run(bulk)


def produce(rate, duration):
    from bench_tasks import noop

    async def go():
        await noop.defer_async(t=0.0)  # open the pool before the clock starts
        return await benchlib.aproduce(rate, duration, lambda t: noop.defer_async(t=t))

    return run(go)


def probe():
    from bench_tasks import noop

    run(lambda: noop.defer_async(t=benchlib.PROBE))


def counts():
    from bench_tasks import app

    async def go():
        rows = await app.job_manager.list_queues_async(queue="bench")
        return rows[0] if rows else {}

    c = run(go)
    return {
        "pending": c.get("todo", 0) + c.get("doing", 0),
        "done": c.get("succeeded", 0),
        "failed": c.get("failed", 0),
        "raw": c,
    }


def worker_argv(burst):
    argv = [
        sys.executable,
        "-m",
        "procrastinate",
        "--log-level=warning",
        "--app=bench_tasks.app",
        "worker",
    ]
    argv += ["--queues=bench", f"--concurrency={CONCURRENCY}"]
    return argv + (["--one-shot"] if burst else ["--wait"])


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
    )
