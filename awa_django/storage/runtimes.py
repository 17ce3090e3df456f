"""Runtime liveness rows: one per worker process, one heartbeat for all its receipts."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import psycopg

from ..sql import query


async def register(
    conn: psycopg.AsyncConnection,
    runtime_id: uuid.UUID,
    hostname: str,
    pid: int,
    queues: Sequence[str],
) -> None:
    await conn.execute(
        query("runtime", "register_runtime"), [runtime_id, hostname, pid, list(queues)]
    )


async def heartbeat(conn: psycopg.AsyncConnection, runtime_id: uuid.UUID) -> None:
    await conn.execute(query("runtime", "heartbeat_runtime"), [runtime_id])


async def unregister(conn: psycopg.AsyncConnection, runtime_id: uuid.UUID) -> None:
    await conn.execute(query("runtime", "unregister_runtime"), [runtime_id])
