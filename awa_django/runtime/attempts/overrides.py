"""Live overrides: every few seconds, apply the operator's per-queue changes.

Each tick reads the overrides of this worker's queues (one small
statement), lays them over each queue's configured policy (the settings
plus ``--queue NAME:N``) and hands a dispatcher its new policy when it
differs from the one it runs (see :meth:`.Dispatcher.apply`).  A cleared
override therefore reverts the option on the next tick.  A stored value
that does not parse is skipped with a warning, the queue's other overrides
still apply.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ...domain.overrides import apply_overrides
from ...storage import AsyncRunner
from ...storage import overrides as override_store
from ..config import PeriodicConfig, QueuePolicy
from ..service import PeriodicService
from .dispatcher import Dispatcher

log = logging.getLogger("awa_django.worker")


class OverrideRefresher(PeriodicService[int]):
    name = "overrides"

    def __init__(
        self,
        config: PeriodicConfig,
        runner: AsyncRunner,
        dispatchers: Sequence[Dispatcher],
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(config)
        self._run = runner
        self._dispatchers = list(dispatchers)
        # What each queue runs with when nothing is overridden.
        self._configured: dict[str, QueuePolicy] = {d.name: d.policy for d in dispatchers}
        self._on_change = on_change
        self._reported: dict[str, dict[str, str]] = {}

    def configured(self, queue: str) -> QueuePolicy:
        """The policy ``queue`` runs with when no override is set."""
        return self._configured[queue]

    async def run_once(self) -> int:
        """Apply the overrides stored now; returns how many queues changed policy."""
        stored = await self._run(override_store.read(list(self._configured)))
        changed = 0
        for dispatcher in self._dispatchers:
            base = self._configured[dispatcher.name]
            queue, problems = apply_overrides(base.queue, stored.get(dispatcher.name, {}))
            if problems != self._reported.get(dispatcher.name, {}):
                for key, problem in problems.items():
                    log.warning(
                        "queue %s: ignoring its override of %s: %s", base.name, key, problem
                    )
                self._reported[dispatcher.name] = problems
            policy = QueuePolicy(queue, base.dlq)
            if policy != dispatcher.policy:
                log.info(
                    "queue %s: applying live overrides %s",
                    base.name,
                    stored.get(dispatcher.name, {}) or "(none: back to the settings)",
                )
                dispatcher.apply(policy)
                changed += 1
        if changed:
            self._on_change()
        return changed
