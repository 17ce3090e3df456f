"""How fast a dispatcher claims: rate limits and the wake-up back-off.

A queue's ``rate_limit`` is a token bucket on job starts.  With
``rate_limit_scope: "process"`` each worker process keeps its own
(:class:`TokenBucket`); a fleet-wide limit (``"fleet"``) takes its tokens
from one row per queue in the database before each claim
(awa.take_rate_tokens), so every process together starts at most the
configured rate; tokens a claim could not use go back, and a loop that got
none sleeps until one is due.

Woken by a NOTIFY, it waits a short back-off before claiming (see
:class:`WakeupBackoff`): notifications arriving meanwhile share that one
claim, and of P worker processes all woken by the same enqueue, the ones
that keep finding the job gone (claimed by another) back off towards the
poll interval, so a job costs about one claim instead of P.

Kept apart from :mod:`.dispatcher` because it is pure pacing arithmetic on
the clock: no claims, no completions.
"""

from __future__ import annotations

import random
import time

from ...conf import RateLimit
from ..config import QueuePolicy

# The shortest wait of a dispatcher whose notified claims came back empty
# (it grows from there); see WakeupBackoff.
BACKOFF_FLOOR = 0.001
# How much each empty / fruitful notified claim lengthens / shortens that wait.
BACKOFF_FACTOR = 4.0


def local_rate(policy: QueuePolicy) -> RateLimit | None:
    """The rate limit this process applies on its own (none for a fleet-wide one)."""
    return policy.rate_limit if policy.queue.rate_limit_scope == "process" else None


def fleet_rate(policy: QueuePolicy) -> RateLimit | None:
    """The rate limit every process shares through the database, if any."""
    return policy.rate_limit if policy.queue.rate_limit_scope == "fleet" else None


class TokenBucket:
    """``rate_limit = (max_rate, burst)``: how many jobs may start now."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._at = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def available(self) -> int:
        self._refill()
        return int(self._tokens)

    def take(self, count: int) -> None:
        self._tokens -= count

    def refund(self, count: int) -> None:
        """Give back tokens taken for jobs a claim did not find."""
        if count:
            self._refill()
            self._tokens = min(self.burst, self._tokens + count)

    def retune(self, rate: float, burst: int) -> None:
        """A new rate and burst; the tokens saved so far are kept (up to the new burst)."""
        self._refill()
        self.rate = rate
        self.burst = burst
        self._tokens = min(self._tokens, float(burst))

    def wait_time(self) -> float:
        self._refill()
        return max(0.0, (1 - self._tokens) / self.rate)


class WakeupBackoff:
    """How long a dispatcher woken by NOTIFY waits before it claims.

    Every worker LISTENing on a queue is woken by each enqueue, so with P
    worker processes P dispatchers claim for one job and P-1 find nothing.
    A dispatcher whose notified claim came back empty lost that race (or the
    job had been taken by an earlier claim): its wait grows ``factor``-fold,
    up to ``cap`` (the poll interval: a dispatcher that keeps losing claims
    about as often as it polls anyway).  A claim that finds work shrinks the
    wait by the same factor, and below ``floor`` it drops to ``base``
    (by default no wait at all: notifications that arrive while a claim
    runs share the next one anyway).  So one dispatcher ends up answering
    NOTIFYs at once while the others stand by, and when work outgrows it,
    their claims find jobs and bring them back.  A jitter of +-50% keeps
    processes that wait alike from claiming in lockstep.
    """

    def __init__(
        self,
        base: float,
        cap: float,
        factor: float = BACKOFF_FACTOR,
        rng: random.Random | None = None,
    ) -> None:
        self.base = base
        self.floor = base if base > 0 else BACKOFF_FLOOR
        self.cap = max(cap, self.floor)
        self.factor = factor
        self.current = base
        self._rng = rng

    def delay(self) -> float:
        """The wait before the next notified claim (jittered, never above ``cap``)."""
        if self.current <= 0:
            return 0.0
        return min(self.cap, self.current * (self._rng or random).uniform(0.5, 1.5))

    def retune(self, cap: float) -> None:
        """A new poll interval: the wait never exceeds it."""
        self.cap = max(cap, self.floor)
        self.current = min(self.current, self.cap)

    def claimed(self, jobs: int) -> None:
        """Learn from a notified claim (or any claim that found work)."""
        if jobs:
            shorter = self.current / self.factor
            self.current = shorter if shorter >= self.floor else self.base
        else:
            self.current = min(self.cap, max(self.floor, self.current * self.factor))
