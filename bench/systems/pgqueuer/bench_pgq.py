"""The PgQueuer factory run by worker.py and its no-op entrypoint."""

import os
from contextlib import asynccontextmanager

import asyncpg
import benchlib
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job


async def connect() -> asyncpg.Connection:
    return await asyncpg.connect(os.environ["DATABASE_URL"])


@asynccontextmanager
async def create():
    connection = await connect()
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        benchlib.record(float(job.payload or b"0"))

    try:
        yield pgq
    finally:
        await connection.close()
