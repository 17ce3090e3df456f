"""Reading the per-key concurrency state (the claim enforces it, see
``sql/schema/concurrency.sql``; nothing here changes it)."""

from __future__ import annotations

from .base import Execute, Steps, operation, single


@operation
def holds_so_far() -> Steps[int]:
    """Times any claim held a job aside for want of a slot (ever)."""
    return int(single((yield Execute.named("concurrency", "holds_so_far"))))


@operation
def key_usage(key: str | None = None) -> Steps[dict[str, tuple[int, int]]]:
    """``{key: (running attempts, held jobs)}`` of every key in use (or of ``key``)."""
    rows = yield Execute.named("concurrency", "key_usage", {"key": key})
    return {name: (int(running), int(held)) for name, running, held in rows}
