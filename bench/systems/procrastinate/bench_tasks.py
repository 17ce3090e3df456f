"""The procrastinate app and its no-op task (async, as procrastinate recommends)."""

import os

import benchlib
import procrastinate

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["DATABASE_URL"])
)


@app.task(name="noop", queue="bench")
async def noop(t: float = 0.0) -> None:
    benchlib.record(t)
