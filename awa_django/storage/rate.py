"""Fleet-wide token buckets: one row per rate-limited queue, shared by every worker."""

from __future__ import annotations

from .base import Execute, Steps, operation


@operation
def take(queue: str, want: int, rate: float, burst: int) -> Steps[tuple[int, float]]:
    """Take up to ``want`` tokens; ``(granted, seconds until the next one when none)``."""
    rows = yield Execute.named("rate", "take_rate_tokens", [queue, want, rate, burst])
    granted, wait = rows[0]
    return int(granted), float(wait)


@operation
def refund(queue: str, count: int, burst: int) -> Steps[None]:
    """Give back ``count`` tokens a claim did not use."""
    yield Execute.named("rate", "refund_rate_tokens", [queue, count, burst])
