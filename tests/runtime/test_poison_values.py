"""Values PostgreSQL refuses: NUL and lone surrogates from handlers and senders.

``jsonb`` and ``text`` cannot hold NUL (U+0000), and UTF-8 cannot carry a
lone surrogate (U+D800).  A handler's error message, traceback, progress,
cancel reason or a callback's error holding one used to make the closure of
its attempt unwritable: the worker dropped the job, the heartbeat handed it
back uncounted, and it ran forever, ``max_attempts`` notwithstanding.  They
are now escaped at the edge (``awa_django.domain.pgtext``); arguments and return
values, stored as ``json``, keep them exactly.

Real PostgreSQL, real workers (in process, or a process for callbacks).
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from psycopg_pool import AsyncConnectionPool
from testapp import jobs

from awa_django import Cancel, TerminalError, job, ops
from awa_django.runtime.completion.heartbeat import Heartbeat
from awa_django.runtime.config import PeriodicConfig
from awa_django.storage import AsyncRunner
from awa_django.storage.attempts import claim
from awa_django.storage.connection import conninfo
from tests.conftest import run_burst, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

NUL = "bad byte \x00 here"
SURROGATE = "lone \ud800 here"
#: Each poison text and how it reads once stored.
POISONS = [(NUL, "bad byte \\x00 here"), (SURROGATE, "lone \\ud800 here")]
RUNS: list[object] = []


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    RUNS.clear()
    yield
    RUNS.clear()


@job(kind="tests.poison.raises")
def raises(text: str) -> None:
    RUNS.append(text)
    raise ValueError(text)


@job(kind="tests.poison.cancels")
def cancels(text: str) -> None:
    raise Cancel(text)


@job(kind="tests.poison.progress", takes_context=True)
def progress(ctx, text: str) -> None:
    ctx.set_progress(50, text, **{text: text})
    raise TerminalError("stop here")


@job(kind="tests.poison.returns")
def returns(text: str) -> dict:
    RUNS.append(text)
    return {"text": text}


def ran(handler, queue: str, poison: str):
    """``handler(poison)`` run by a burst worker; the job's info afterwards."""
    ref = handler.using(queue=queue).enqueue(poison)
    run_burst(queue, timeout=20)
    return ops.get_job(ref.id)


@pytest.mark.parametrize(("poison", "stored"), POISONS, ids=["nul", "surrogate"])
def test_an_error_message_with_a_poison_character_ends_at_max_attempts(queue, poison, stored):
    """The reported loop: ValueError("bad byte \\x00 here") ran forever."""
    ref = raises.using(queue=queue, max_attempts=1).enqueue(poison)
    run_burst(queue, timeout=20)

    info = ops.get_job(ref.id)
    assert (info.state, info.attempt) == ("failed", 1)
    assert RUNS == [poison]  # the argument (json) kept the character exactly
    assert info.args == [poison]
    [error] = info.errors
    assert error["message"] == stored and stored in error["traceback"]


@pytest.mark.parametrize(("poison", "stored"), POISONS, ids=["nul", "surrogate"])
def test_a_cancel_reason_with_a_poison_character_cancels(queue, poison, stored):
    info = ran(cancels, queue, poison)
    assert info.state == "cancelled"
    assert info.errors[-1]["message"] == stored


@pytest.mark.parametrize(("poison", "stored"), POISONS, ids=["nul", "surrogate"])
def test_progress_with_a_poison_character_is_kept_escaped(queue, poison, stored):
    info = ran(progress, queue, poison)
    assert info.state == "failed"
    assert info.progress == {"percent": 50, "message": stored, "checkpoint": {stored: stored}}


@pytest.mark.parametrize("poison", [NUL, SURROGATE], ids=["nul", "surrogate"])
def test_a_return_value_with_a_poison_character_is_kept(queue, poison):
    info = ran(returns, queue, poison)
    assert (info.state, info.return_value) == ("completed", {"text": poison})


def test_a_callback_failed_or_completed_with_poison_characters(start_worker, queue):
    """The sender's error is escaped (it used to raise, an HTML 500 over HTTP,
    so senders retried forever); a completion payload is kept exactly."""
    failing = [jobs.park.using(queue=queue).enqueue() for _ in POISONS]
    completing = jobs.park.using(queue=queue).enqueue()
    start_worker("--queue", f"{queue}:3")

    for ref, (poison, stored) in zip(failing, POISONS, strict=True):
        ops.fail_external(parked(ref.id), poison)
        info = ops.get_job(ref.id)
        assert info.state == "failed" and info.errors[-1]["message"] == stored

    ops.complete_external(parked(completing.id), {"text": NUL + SURROGATE})
    info = ops.get_job(completing.id)
    assert (info.state, info.return_value) == ("completed", {"text": NUL + SURROGATE})


def parked(job_id: int):
    def ready():
        info = ops.get_job(job_id)
        return info.callback_id if info and info.state == "waiting_external" else None

    return wait_for(ready, timeout=30)


def test_an_orphaned_attempt_is_handed_back_counted_so_it_cannot_loop(queue):
    """A runtime that drops an attempt (its closure refused, its claim's answer
    lost) gets it back from its heartbeat: counted, so the same attempt
    cannot come back forever; past ``max_attempts`` it fails without running."""
    ref = returns.using(queue=queue, max_attempts=1).enqueue("never runs")

    async def scenario(run: AsyncRunner):
        runtime = uuid.uuid4()
        (dropped,) = await run(claim(queue, 1, runtime, 0.0, 0.0))
        beat = Heartbeat(PeriodicConfig(1e-6), run, runtime)  # runs nothing
        await beat.register([queue], 1)
        handed = await beat.run_once()
        await beat.unregister()
        return dropped, handed

    dropped, handed = asyncio.run(with_runner(scenario))
    assert dropped.attempt == 1 and handed["handed_back"] == 1
    assert ops.get_job(ref.id).attempt == 1  # counted

    run_burst(queue, timeout=20)
    info = ops.get_job(ref.id)
    assert RUNS == [] and info.state == "failed"
    assert "handed back after its last attempt" in info.errors[-1]["message"]


async def with_runner(scenario):
    async with AsyncConnectionPool(conninfo(), kwargs={"autocommit": True}, open=False) as pool:
        return await scenario(AsyncRunner(pool))
