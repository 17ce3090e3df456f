"""Static assertions on ``@periodic``: it returns the job below it unchanged.

Checked by mypy (``make typecheck``), never run or imported: importing it
would declare a schedule.
"""

from __future__ import annotations

from typing import assert_type

from awa_django import JobContext, job, periodic
from awa_django.jobs import ContextJob, Job


@periodic("0 3 * * *", timezone="Europe/Paris")
@job(queue="reports")
def nightly(day: str, /) -> int:
    return len(day)


@periodic("*/5 * * * *", name="typecheck.tick", args=("x",))
@job(takes_context=True)
def tick(ctx: JobContext, label: str, /) -> None:
    pass


def periodic_keeps_the_job_type() -> None:
    assert_type(nightly, Job[[str], int])
    assert_type(tick, ContextJob[[str], None])
    nightly.enqueue("2030-01-01")
    nightly.enqueue(1)  # type: ignore[arg-type]


def periodic_needs_a_job() -> None:
    def plain() -> None: ...

    periodic("0 3 * * *")(plain)  # type: ignore[type-var]
