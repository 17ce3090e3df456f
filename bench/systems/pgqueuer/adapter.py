"""PgQueuer adapter: Queries.enqueue (lists for bulk), `pgq run` (asyncpg driver)."""

import asyncio
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent))

import benchlib  # noqa: E402

BATCH_SIZE = 100


def describe():
    return {
        "concurrency": f"1 process, pgqueuer.run(batch_size={BATCH_SIZE}) = `pgq run` "
        "(async entrypoint, no max_concurrent_tasks cap)",
        "config": "AsyncpgDriver (one asyncpg connection), LISTEN/NOTIFY (default), "
        "finished jobs moved to pgqueuer_log (default)",
        "bulk_path": "Queries.enqueue([entrypoints], [payloads], [priorities]) (one statement)",
        "single_path": "Queries.enqueue('noop', payload) (one transaction per job)",
    }


def queries_call(body):
    from bench_pgq import connect
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    async def main():
        connection = await connect()
        try:
            return await body(Queries(AsyncpgDriver(connection)))
        finally:
            await connection.close()

    return asyncio.run(main())


def install():
    queries_call(lambda q: q.install())


def enqueue_bulk(n):
    async def bulk(q):
        started = asyncio.get_running_loop().time()
        await q.enqueue(["noop"] * n, [b"0"] * n, [0] * n)
        return asyncio.get_running_loop().time() - started

    return queries_call(bulk)


def produce(rate, duration):
    async def go(q):
        return await benchlib.aproduce(
            rate, duration, lambda t: q.enqueue("noop", repr(t).encode())
        )

    return queries_call(go)


def probe():
    queries_call(lambda q: q.enqueue("noop", repr(benchlib.PROBE).encode()))


def counts():
    async def go(q):
        return await q.queue_size()

    rows = queries_call(go)
    pending = sum(r.count for r in rows if r.status in ("queued", "picked"))
    return {"pending": pending, "done": None, "raw": [r.model_dump(mode="json") for r in rows]}


def worker_argv(burst):
    mode = "drain" if burst else "continuous"
    return [sys.executable, str(HERE / "worker.py"), mode, str(BATCH_SIZE)]


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
