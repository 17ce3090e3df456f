"""Retry backoff for failed attempts.

delay(attempt) = min(2 ** attempt, MAX_BACKOFF) * uniform(1, 1 + JITTER)

with ``attempt`` the number of the attempt that just failed (1, 2, ...):
about 2 s, 4 s, 8 s, ... doubling up to one hour, plus up to 25 % random
jitter so a burst of failures does not come back as a burst of retries.
"""

from __future__ import annotations

import random

MAX_BACKOFF = 3600.0
JITTER = 0.25


def retry_delay(attempt: int, rng: random.Random | None = None) -> float:
    base = min(2.0 ** max(attempt, 1), MAX_BACKOFF)
    return base * (rng or random).uniform(1.0, 1.0 + JITTER)
