"""Jobs the test suite runs through real workers (autodiscovered, like any app's)."""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import threading
import time
import uuid

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connection, transaction

from awa_django import Cancel, RetryAfter, Snooze, TerminalError, job

from .models import ExactlyOnce, Execution


def _record(ctx, label: str) -> None:
    Execution.objects.create(
        job_id=ctx.job_id, label=label, attempt=ctx.attempt, run_lease=ctx.run_lease
    )


@job(kind="testapp.once", takes_context=True)
def once(ctx, value: int) -> int:
    ExactlyOnce.objects.create(job_id=ctx.job_id, value=value)
    return value


@job(kind="testapp.record", takes_context=True)
def record(ctx, label: str = "ran") -> dict:
    _record(ctx, label)
    return {"label": label, "attempt": ctx.attempt}


@job(kind="testapp.record_async", takes_context=True)
async def record_async(ctx, label: str = "async") -> str:
    await asyncio.sleep(0)
    await sync_to_async(_record)(ctx, label)
    return label


@job(kind="testapp.timed_async", max_attempts=1)
async def timed_async(seconds: float) -> bool:
    """Bounds its own work with ``asyncio.timeout`` and a task group from
    its first line: both bind to the attempt's own task.  Returns whether
    that task is the attempt's alone (not the worker's claim loop)."""
    own = asyncio.current_task()
    async with asyncio.timeout(seconds):
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(0))
        await asyncio.sleep(30)  # ended by the timeout
    return own is not None


@job(kind="testapp.plain")
def plain(a: int, b: int = 0) -> int:
    return a + b


@job(kind="testapp.retry_after", takes_context=True)
def retry_after(ctx, delay: float) -> None:
    _record(ctx, "retry_after")
    raise RetryAfter(delay)


@job(kind="testapp.fail_then_succeed", takes_context=True)
def fail_then_succeed(ctx, failures: int) -> str:
    _record(ctx, "attempt")
    if ctx.attempt <= failures:
        raise RetryAfter(0, f"failing attempt {ctx.attempt}")
    return "ok"


@job(kind="testapp.snooze_once", takes_context=True)
def snooze_once(ctx) -> str:
    _record(ctx, "snooze_once")
    if Execution.objects.filter(job_id=ctx.job_id).count() == 1:
        raise Snooze(0)
    return "woke"


@job(kind="testapp.cancel", takes_context=True)
def cancel(ctx) -> None:
    _record(ctx, "cancel")
    raise Cancel("not needed any more")


@job(kind="testapp.terminal", takes_context=True)
def terminal(ctx) -> None:
    _record(ctx, "terminal")
    raise TerminalError("card declined")


@job(kind="testapp.boom", takes_context=True)
def boom(ctx) -> None:
    _record(ctx, "boom")
    raise ValueError("boom")


@job(kind="testapp.sleep", takes_context=True)
def sleep(ctx, seconds: float, label: str = "slept") -> str:
    _record(ctx, "started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)
    _record(ctx, label)
    return label


@job(kind="testapp.checkpoint", takes_context=True)
def checkpoint(ctx, fail_first: bool = True, hold: float = 0.0) -> dict | None:
    """Resumes from its last checkpoint; fails once after reporting progress."""
    _record(ctx, "checkpoint")
    start = (ctx.progress or {}).get("checkpoint", {}).get("done", 0)
    ctx.set_progress(50, "half way", done=start + 5)
    if hold:
        time.sleep(hold)
    if fail_first and ctx.attempt == 1:
        raise RetryAfter(0, "transient")
    return {"resumed_from": start}


@job(kind="testapp.noop_async")
async def noop_async(n: int = 0) -> None:
    return None


@job(kind="testapp.noop")
def noop(n: int = 0) -> None:
    return None


@job(kind="testapp.gc_frozen")
def gc_frozen() -> int:
    """How many objects the collector of the worker running it keeps frozen
    (Python 3.12 starts with a few hundred of its own)."""
    return gc.get_freeze_count()


@job(kind="testapp.crashable", takes_context=True)
def crashable(ctx, first_attempt_seconds: float) -> str:
    """Slow on its first attempt (so a test can kill the worker mid-run), quick after."""
    _record(ctx, "started")
    time.sleep(first_attempt_seconds if ctx.attempt == 1 else 0.01)
    _record(ctx, "finished")
    return "done"


@job(kind="testapp.overrun", takes_context=True)
def overrun(ctx, seconds: float) -> bool:
    """Ignores its deadline: runs until its attempt is no longer the job's
    running one (the leader's rescue closed it) and the worker told it so, or
    for ``seconds``, then reports whether it was told to stop.  Tests give a generous ``seconds``
    and so wait for the rescue itself, however long the leader takes to be
    elected (a fixed two-second run raced it on a loaded box)."""
    from awa_django import ops

    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        info = ops.get_job(ctx.job_id)
        if info is None or info.state != "running" or info.run_lease != ctx.run_lease:
            break
        time.sleep(0.05)
    while not ctx.is_cancelled() and time.monotonic() < give_up:
        time.sleep(0.02)  # rescued: the worker tells the handler next
    _record(ctx, f"cancelled={ctx.is_cancelled()}")
    return ctx.is_cancelled()


RELEASE = "release"


@job(kind="testapp.gated", takes_context=True)
def gated(ctx, timeout: float = 60.0) -> str:
    """Reports progress, then holds until the test releases it (no fixed hold to race).

    The test releases the job by writing an ``Execution`` row labelled
    :data:`RELEASE` for it.  The handler stops waiting when its attempt is
    cancelled (hand-back, rescue) and fails after ``timeout`` seconds, so a
    broken test never leaves a worker busy for long.
    """
    _record(ctx, "started")
    ctx.set_progress(50, "waiting for release", done=5)
    deadline = time.monotonic() + timeout
    while not Execution.objects.filter(job_id=ctx.job_id, label=RELEASE).exists():
        if ctx.is_cancelled():
            return "cancelled"
        if time.monotonic() > deadline:
            raise TerminalError(f"not released within {timeout}s")
        time.sleep(0.02)
    _record(ctx, "finished")
    return "released"


# The side table of ``crash_probe``; tests/reliability creates it on its
# throwaway database (this app has no model for it: it lives only there).
CRASH_PROBE_TABLE = "crash_probe_runs"
CRASH_PROBE_DDL = f"""
CREATE TABLE {CRASH_PROBE_TABLE} (
    job_id      bigint      NOT NULL,
    run_lease   bigint      NOT NULL,
    claim_nonce bigint,
    token       uuid        PRIMARY KEY,
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


@job(kind="testapp.crash_probe", takes_context=True)
def crash_probe(ctx, sleep_ms: float = 3.0, record_timeout: float = 60.0) -> str:
    """Records this execution durably, sleeps, returns a token unique to the execution.

    The row (job_id, run_lease, claim_nonce, token) is committed with
    synchronous_commit on, on Django's connection (not the worker's), before
    the handler returns, so after a server crash the table still lists every
    execution whose completion could have been written.  While the server is
    down the insert is retried on a fresh connection (for ``record_timeout``
    seconds): the handler outlives a crash like any handler would.
    """
    token = uuid.uuid4()
    _insert_durably(
        f"INSERT INTO {CRASH_PROBE_TABLE} (job_id, run_lease, claim_nonce, token)"
        " VALUES (%s, %s, %s, %s) ON CONFLICT (token) DO NOTHING",
        [ctx.job_id, ctx.run_lease, ctx.claim_nonce, token],
        record_timeout,
    )
    time.sleep(sleep_ms / 1000)
    return str(token)


def _insert_durably(sql: str, params: list, timeout: float) -> None:
    """Run one idempotent INSERT with synchronous_commit on, on Django's
    connection, retrying on a fresh connection for up to ``timeout`` seconds
    while the server is away (restarted, out of connections, or the session
    was terminated)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit = on")
                # A retry after a commit whose answer the crash swallowed
                # finds its own row: the same execution, already recorded.
                cursor.execute(sql, params)
            return
        except (OperationalError, InterfaceError):
            connection.close()  # the server went away: reconnect on the next try
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# The side table of ``chaos_probe`` (tests/reliability/chaos.py creates it on
# each scenario's database): one row per execution of the handler.
CHAOS_PROBE_TABLE = "chaos_probe_runs"
CHAOS_PROBE_DDL = f"""
CREATE TABLE {CHAOS_PROBE_TABLE} (
    job_id      bigint      NOT NULL,
    run_lease   bigint      NOT NULL,
    attempt     integer     NOT NULL,
    pid         integer     NOT NULL,
    claim_nonce bigint,
    token       uuid        PRIMARY KEY,
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


@job(kind="testapp.chaos_probe", takes_context=True)
def chaos_probe(ctx, work_ms: float = 20.0, record_timeout: float = 120.0) -> str:
    """Records this execution (job_id, run_lease, attempt, pid), works for
    ``work_ms``, returns a token unique to the execution.

    Like :func:`crash_probe`, the row is durable before the handler returns
    and the insert outlives an unreachable server, so the chaos harness can
    tell, for each completion, which execution produced it and how often
    each job ran.
    """
    token = uuid.uuid4()
    _insert_durably(
        f"INSERT INTO {CHAOS_PROBE_TABLE} (job_id, run_lease, attempt, pid, claim_nonce, token)"
        " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (token) DO NOTHING",
        [ctx.job_id, ctx.run_lease, ctx.attempt, os.getpid(), ctx.claim_nonce, token],
        record_timeout,
    )
    time.sleep(work_ms / 1000)
    return str(token)


# --- callbacks and leases -----------------------------------------------------


@job(kind="testapp.park", takes_context=True)
def park(ctx, timeout: float = 60.0) -> None:
    """Registers a callback and parks until it is resolved (or times out)."""
    from awa_django import WaitForCallback

    ctx.set_progress(10, "parked")
    ctx.register_callback(timeout)
    _record(ctx, "parked")
    raise WaitForCallback()


@job(kind="testapp.park_async", takes_context=True)
async def park_async(ctx, timeout: float = 60.0) -> None:
    from awa_django import WaitForCallback

    await ctx.aregister_callback(timeout)
    raise WaitForCallback()


@job(kind="testapp.sequential", takes_context=True)
def sequential(ctx, rounds: int = 2, timeout: float = 30.0) -> list:
    """Waits for ``rounds`` callbacks one after the other; returns their payloads."""
    payloads = []
    for n in range(rounds):
        callback_id = ctx.register_callback(timeout)
        _record(ctx, f"waiting {n}")
        payloads.append(ctx.wait_for_callback(callback_id, timeout))
    return payloads


@job(kind="testapp.sequential_async", takes_context=True)
async def sequential_async(ctx, timeout: float = 30.0):
    callback_id = await ctx.aregister_callback(timeout)
    return await ctx.await_callback(callback_id, timeout)


@job(kind="testapp.until_cancelled", takes_context=True)
def until_cancelled(ctx, timeout: float = 30.0, heartbeat: bool = False) -> str:
    """Runs until its context is cancelled; records when it noticed."""
    if heartbeat:
        ctx.heartbeat()
    _record(ctx, "started")
    deadline = time.monotonic() + timeout
    while not ctx.is_cancelled():
        if time.monotonic() > deadline:
            raise TerminalError(f"not cancelled within {timeout}s")
        time.sleep(0.01)
    _record(ctx, "noticed")
    return "stopped"


@job(kind="testapp.register_then_gate", takes_context=True)
def register_then_gate(ctx, timeout: float = 30.0) -> None:
    """Registers a callback, then holds until released before it parks."""
    from awa_django import WaitForCallback

    ctx.register_callback(timeout)
    _record(ctx, "registered")
    deadline = time.monotonic() + timeout
    while not Execution.objects.filter(job_id=ctx.job_id, label=RELEASE).exists():
        if time.monotonic() > deadline:
            raise TerminalError(f"not released within {timeout}s")
        time.sleep(0.02)
    _record(ctx, f"cancelled={ctx.is_cancelled()}")
    raise WaitForCallback()


@job(kind="testapp.wait_then_gate", takes_context=True)
def wait_then_gate(ctx, wait: float = 30.0, timeout: float = 30.0) -> object:
    """Waits for one callback (``wait`` seconds; a timeout is recorded, not
    raised), then holds until released; returns the callback's payload."""
    callback_id = ctx.register_callback(timeout)
    _record(ctx, "registered")
    try:
        payload = ctx.wait_for_callback(callback_id, wait)
        _record(ctx, "resumed")
    except TimeoutError:
        payload = None
        _record(ctx, "timed out")
    deadline = time.monotonic() + timeout
    while not Execution.objects.filter(job_id=ctx.job_id, label=RELEASE).exists():
        if ctx.is_cancelled() or time.monotonic() > deadline:
            raise TerminalError(f"not released within {timeout}s")
        time.sleep(0.02)
    return payload


@job(kind="testapp.long_progress", takes_context=True)
def long_progress(ctx, timeout: float = 30.0) -> str:
    """Heartbeats, reports progress, fails its first attempt; the retry sees the progress."""
    ctx.heartbeat()
    if ctx.attempt == 1:
        ctx.set_progress(40, "first half", step=2)
        _record(ctx, "reported")
        deadline = time.monotonic() + timeout
        while not Execution.objects.filter(job_id=ctx.job_id, label=RELEASE).exists():
            if ctx.is_cancelled() or time.monotonic() > deadline:
                return "stopped"
            time.sleep(0.02)
        raise RuntimeError("first attempt fails after reporting progress")
    return f"resumed at step {ctx.progress['checkpoint']['step']}"


@job(kind="testapp.fails_until_released", takes_context=True)
def fails_until_released(ctx) -> str:
    """Fails terminally until the test writes a RELEASE row for the job (a fix is deployed)."""
    _record(ctx, "attempt")
    if not Execution.objects.filter(job_id=ctx.job_id, label=RELEASE).exists():
        raise TerminalError("not fixed yet")
    return f"fixed on attempt {ctx.attempt}"


@job(kind="testapp.charge", takes_context=True)
def charge(ctx, customer_id: int, *, amount: int = 1) -> str:
    """Records the arguments it runs with and fails for good on a customer id
    below 1: bad arguments, which an operator edits before retrying."""
    _record(ctx, f"charge {customer_id} {amount}")
    if customer_id < 1:
        raise TerminalError(f"no customer {customer_id}")
    return f"charged customer {customer_id} {amount}"


# --- capacity: how many jobs of a queue run at once -------------------------------


class Holds:
    """What ``testapp.held`` jobs do, per queue, in this process.

    Each held job counts itself running until the test releases it
    (:meth:`release`), so a test sees how many jobs of each queue a worker
    runs at once (``running``) and the most it ever ran (``peak``).  For
    in-process workers only (the counters live in this module).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.running: collections.Counter[str] = collections.Counter()
        self.peak: collections.Counter[str] = collections.Counter()
        self.started: collections.Counter[str] = collections.Counter()
        self.start_times: dict[str, list[float]] = collections.defaultdict(list)
        self._released: collections.Counter[str] = collections.Counter()

    def enter(self, queue: str) -> None:
        with self._cond:
            self.running[queue] += 1
            self.started[queue] += 1
            self.start_times[queue].append(time.monotonic())
            self.peak[queue] = max(self.peak[queue], self.running[queue])
            self._cond.notify_all()

    def hold(self, queue: str, ctx, timeout: float) -> bool:
        """Wait for a release of ``queue``; False when cancelled or timed out."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._released[queue] == 0:
                if ctx.is_cancelled() or time.monotonic() > deadline:
                    return False
                self._cond.wait(0.02)
            self._released[queue] -= 1
            return True

    def leave(self, queue: str) -> None:
        with self._cond:
            self.running[queue] -= 1
            self._cond.notify_all()

    def release(self, queue: str, count: int = 1) -> None:
        """Let ``count`` held jobs of ``queue`` finish (now or as they start)."""
        with self._cond:
            self._released[queue] += count
            self._cond.notify_all()

    def reset_peak(self, queue: str) -> None:
        """Measure the peak from now on (from the jobs running now)."""
        with self._cond:
            self.peak[queue] = self.running[queue]

    def snapshot(self, *queues: str) -> tuple[int, ...]:
        with self._cond:
            return tuple(self.running[q] for q in queues)


HOLDS = Holds()


@job(kind="testapp.held", takes_context=True)
def held(ctx, timeout: float = 30.0) -> bool:
    """Runs until the test releases it through :data:`HOLDS` (or ``timeout``)."""
    HOLDS.enter(ctx.queue)
    try:
        return HOLDS.hold(ctx.queue, ctx, timeout)
    finally:
        HOLDS.leave(ctx.queue)


@job(kind="testapp.lease_state", takes_context=True)
async def lease_state(ctx) -> bool:
    """Whether the attempt runs under a lease (a ``long_running`` queue's do)."""
    from awa_django.runtime.completion.leases import is_leased

    return is_leased(ctx)


@job(kind="testapp.started", takes_context=True)
async def started(ctx) -> None:
    """Records when it started (``HOLDS.start_times``) and finishes at once."""
    HOLDS.enter(ctx.queue)
    HOLDS.leave(ctx.queue)


# --- atomic handlers (tests/beyond/test_atomic.py) --------------------------------

#: Queue suffix of the follow-up jobs atomic test handlers enqueue.
FOLLOW_UP = "-next"


def _follow_up(ctx, label: str) -> None:
    """Enqueue a ``record`` job on the follow-up queue of ``ctx.queue`` (in the
    handler's transaction, so it exists only if the attempt commits)."""
    record.using(queue=f"{ctx.queue}{FOLLOW_UP}").enqueue(label)


@job(kind="testapp.atomic_record", takes_context=True, atomic=True)
def atomic_record(ctx, failures: int = 0, outcome: str = "boom", heartbeat: bool = False) -> dict:
    """Writes a row and enqueues a follow-up, then raises ``outcome`` on its
    first ``failures`` runs (counted by run_lease: a snoozed re-run keeps its
    attempt number) and returns on the next."""
    if heartbeat:
        ctx.heartbeat()  # escalates to a lease: the close takes the lease path
    _record(ctx, "atomic")
    _follow_up(ctx, f"after run {ctx.run_lease}")
    if ctx.run_lease <= failures:
        if outcome == "retry":
            raise RetryAfter(0, "try again")
        if outcome == "snooze":
            raise Snooze(0)
        if outcome == "cancel":
            raise Cancel("changed my mind")
        if outcome == "terminal":
            raise TerminalError("no way")
        raise ValueError("boom")
    return {"attempt": ctx.attempt, "run_lease": ctx.run_lease}


@job(kind="testapp.atomic_gated", takes_context=True, atomic=True)
def atomic_gated(ctx, timeout: float = 60.0) -> str:
    """Writes a row inside its transaction, reports progress (written by the
    worker on its own connection, so a test can see the attempt running),
    then holds until the test commits a :data:`RELEASE` row for the job --
    whatever happens to its attempt meanwhile -- and returns."""
    _record(ctx, "started")
    ctx.set_progress(50, "holding its transaction open")
    deadline = time.monotonic() + timeout
    while not Execution.objects.filter(job_id=ctx.job_id, label=RELEASE).exists():
        if time.monotonic() > deadline:
            raise TerminalError(f"not released within {timeout}s")
        time.sleep(0.02)
    _record(ctx, "finished")
    _follow_up(ctx, "after gated")
    return f"released (cancelled={ctx.is_cancelled()})"


@job(kind="testapp.atomic_overrun", takes_context=True, atomic=True)
def atomic_overrun(ctx, seconds: float) -> bool:
    """Writes, then overruns its deadline without looking, then returns."""
    _record(ctx, "overrun")
    _follow_up(ctx, "after overrun")
    time.sleep(seconds)
    return ctx.is_cancelled()


@job(kind="testapp.sealed", takes_context=True, encrypt=True)
def sealed(ctx, secret: str, fail: bool = False) -> dict:
    """An encrypted job: records what it received (outside the awa schema),
    reports it as progress, and returns it -- or fails with it in the message."""
    _record(ctx, secret)
    ctx.set_progress(message=secret, seen=secret)
    if fail:
        raise TerminalError(f"could not deliver to {secret}")
    return {"echo": secret}


@job(kind="testapp.sealed_async", encrypt=True)
async def sealed_async(secret: str) -> str:
    """The async twin of :func:`sealed` (no context): returns what it received."""
    return secret
