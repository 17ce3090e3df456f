"""Leases and callbacks on the worker side.

A handler's context reaches the database only through an
:class:`AttemptLease` (the :class:`~awa_django.context.AttemptControl` of
one attempt).  Its calls run on the worker's event loop and connection
pool: from a sync handler's thread they block that thread until the loop
has done the work; in an ``async def`` handler the ``a``-prefixed methods
are awaited.  :class:`LeaseHub` is the process-wide part: it knows which
sequential waits are open and wakes them when ``awa!callbacks`` says their
callback was resumed, and it cancels contexts when ``awa!cancel`` says their
attempt was closed by an operator or a callback.

Waits do not depend on NOTIFY alone: a waiting handler also polls for its
payload every :data:`WAIT_POLL` seconds, so a notification lost to a
reconnect costs latency, never the payload.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from ...context import JobContext
from ...domain import sealing
from ...domain.records import ClaimedJob
from ...outcomes import Cancel
from ...storage import AsyncRunner, leases
from .inflight import Inflight, nothing_inflight

log = logging.getLogger("awa_django.worker")

T = TypeVar("T")

#: Seconds between polls of a sequential wait for its payload (NOTIFY is the fast path).
WAIT_POLL = 1.0

#: NOTIFY channels the database signals on (see ``sql/schema/leases.sql``).
CANCEL_CHANNEL = "awa!cancel"  # "!" is not allowed in queue names: no clash
CALLBACK_CHANNEL = "awa!callbacks"


class LeaseHub:
    """Process-wide lease bookkeeping: open waits, and NOTIFY dispatch."""

    def __init__(
        self, runner: AsyncRunner, runtime_id: uuid.UUID, inflight: Inflight = nothing_inflight
    ) -> None:
        self.run = runner
        self.runtime_id = runtime_id
        self._inflight = inflight
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        # callback id -> the event a resume sets for the handler waiting on it
        self._waits: dict[uuid.UUID, asyncio.Event] = {}

    def bind(self) -> None:
        """Remember the worker's event loop (call from inside it, at start-up)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def control(self, job: ClaimedJob, ctx: JobContext) -> AttemptLease:
        """The lease of ``job``'s attempt, for its context ``ctx`` (built on
        the context's first escalation)."""
        lease = AttemptLease(self, job)
        lease.ctx = ctx
        return lease

    def on_loop_thread(self) -> bool:
        return threading.get_ident() == self._loop_thread

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the worker's loop from a handler thread and wait for it."""
        if self._loop is None or self.on_loop_thread():
            coro.close()
            raise RuntimeError(
                "this call blocks: in an async def handler use its a-prefixed twin "
                "(await ctx.aregister_callback / ctx.await_callback / ctx.aheartbeat)"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def open_wait(self, callback_id: uuid.UUID) -> asyncio.Event:
        return self._waits.setdefault(callback_id, asyncio.Event())

    def close_wait(self, callback_id: uuid.UUID) -> None:
        self._waits.pop(callback_id, None)

    def callback_resumed(self, callback_id: str) -> None:
        """NOTIFY ``awa!callbacks``: wake the handler waiting for it, if it is ours."""
        try:
            event = self._waits.get(uuid.UUID(callback_id))
        except ValueError:
            return
        if event is not None:
            event.set()

    def attempt_closed(self, payload: str) -> None:
        """NOTIFY ``awa!cancel`` ("job_id:run_lease"): cancel that attempt's context here."""
        try:
            job_id, run_lease = (int(part) for part in payload.split(":"))
        except ValueError:
            return
        for job, ctx in self._inflight():
            if job.job_id == job_id and job.run_lease == run_lease and not ctx.is_cancelled():
                log.warning(
                    "job %s attempt %s was closed elsewhere; cancelling it", job_id, job.attempt
                )
                ctx.cancel()
                for event in self._waits.values():
                    event.set()  # waits recheck their context


class AttemptLease:
    """The :class:`~awa_django.context.AttemptControl` of one running attempt."""

    __slots__ = ("_background", "_hub", "callback_id", "ctx", "job", "leased")

    def __init__(self, hub: LeaseHub, job: ClaimedJob) -> None:
        self._hub = hub
        self.job = job
        self.ctx: JobContext | None = None
        self.leased = False
        self.callback_id: uuid.UUID | None = None
        self._background: asyncio.Task[None] | None = None

    async def _materialize(self, callback_id: uuid.UUID | None, timeout: float) -> None:
        ok = await self._hub.run(
            leases.materialize(self.job, self._hub.runtime_id, callback_id, timeout)
        )
        if not ok:
            if self.ctx is not None:
                self.ctx.cancel()
            raise Cancel("the attempt was closed elsewhere (cancelled or rescued)")
        self.leased = True
        if callback_id is not None:
            self.callback_id = callback_id

    @property
    def pending(self) -> bool:
        """A registration started in the background has not been awaited yet."""
        return self._background is not None

    async def settled(self) -> None:
        """Wait for a registration an async handler started without awaiting it."""
        task, self._background = self._background, None
        if task is not None:
            await task

    # --- AttemptControl -----------------------------------------------------

    def register_callback(self, timeout: float) -> uuid.UUID:
        callback_id = uuid.uuid4()
        if self._hub.on_loop_thread():
            # An async handler called the blocking form: register in the
            # background; parking or waiting awaits it first.
            self._background = asyncio.get_running_loop().create_task(
                self._materialize(callback_id, timeout)
            )
        else:
            self._hub.call(self._materialize(callback_id, timeout))
        return callback_id

    async def aregister_callback(self, timeout: float) -> uuid.UUID:
        await self.settled()
        callback_id = uuid.uuid4()
        await self._materialize(callback_id, timeout)
        return callback_id

    def wait_for_callback(self, callback_id: uuid.UUID, timeout: float) -> Any:
        return self._hub.call(self.await_callback(callback_id, timeout))

    async def await_callback(self, callback_id: uuid.UUID, timeout: float) -> Any:
        await self.settled()
        if callback_id != self.callback_id:
            raise ValueError(f"callback {callback_id} was not registered by this attempt")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        event = self._hub.open_wait(callback_id)
        job_id, run_lease = self.job.job_id, self.job.run_lease
        # The first look marks the wait (the job shows waiting_external until
        # the resume spends the callback); later polls only read.
        look = leases.mark_wait(job_id, run_lease, callback_id, True)
        try:
            while True:
                event.clear()
                found, payload = await self._hub.run(look)
                if found:
                    self.callback_id = None
                    return _received(payload)
                if self.ctx is not None and self.ctx.is_cancelled():
                    raise Cancel("the attempt was closed while waiting for its callback")
                left = deadline - loop.time()
                if left <= 0:
                    # The handler goes on without the payload: unmark, and
                    # take a resume that came at the last moment.
                    found, payload = await self._hub.run(
                        leases.mark_wait(job_id, run_lease, callback_id, False)
                    )
                    if found:
                        self.callback_id = None
                        return _received(payload)
                    raise TimeoutError(f"callback {callback_id} not resumed within {timeout}s")
                look = leases.callback_result(job_id, run_lease, callback_id)
                try:
                    await asyncio.wait_for(event.wait(), timeout=min(left, WAIT_POLL))
                except TimeoutError:
                    pass
        finally:
            self._hub.close_wait(callback_id)

    def heartbeat(self) -> None:
        if self._hub.on_loop_thread():
            self._background = asyncio.get_running_loop().create_task(self._materialize(None, 0))
        else:
            self._hub.call(self._materialize(None, 0))

    async def aheartbeat(self) -> None:
        await self.settled()
        await self._materialize(None, 0)

    # --- the executor's side ------------------------------------------------

    async def park(self) -> bool:
        """The handler raised WaitForCallback: park the lease; False when the
        attempt had no callback registered."""
        await self.settled()
        if not self.leased or self.callback_id is None:
            return False
        progress = self.ctx.progress_snapshot()[1] if self.ctx is not None else None
        parked = await self._hub.run(leases.park(self.job, progress))
        if not parked:
            log.info(
                "job %s attempt %s: callback resolved before the handler parked",
                self.job.job_id,
                self.job.attempt,
            )
        return True


def is_leased(ctx: JobContext) -> bool:
    """Whether this context's attempt escalated to a lease (it closes through the lease path)."""
    control = ctx._control
    return isinstance(control, AttemptLease) and control.leased


def _received(payload: Any) -> Any:
    """A callback's payload as the waiting handler takes it: opened when it
    was sealed for an encrypted job (``ops.resume_external``)."""
    return sealing.keyring().open_json(payload) if sealing.is_sealed(payload) else payload
