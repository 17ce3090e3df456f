"""The ``manage.py awa_bench`` stages that live in the repository, not in the wheel.

The command measures enqueue, drain and pickup latency on any installation
(:mod:`awa_django.management.bench`).  The stages here need more than the
public API: they time bare storage operations or register observers and
jobs of their own, so they stay with the repository and the command loads
them when one of their options is given (``bench`` must be importable: run
``testproject/manage.py`` from a checkout, or put the checkout's root on
``PYTHONPATH``).

- :mod:`.hot_path`: ``--backlog``, ``--serial``, ``--hot-queue`` (``--stripes``)
- :mod:`.oversupply`: ``--oversupply``
- :mod:`.telemetry`: ``--telemetry`` (needs the ``otel`` extra)
- :mod:`.atomic`: ``--atomic``
- :mod:`.concurrency`: ``--concurrency``
- :mod:`.encrypted`: ``--encrypted``
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.progress import Progress


def alternate(
    rounds: int, sides: tuple[str, str], run_side: Callable[[str], dict[str, Any]]
) -> dict[str, float]:
    """Jobs per second of each side over ``rounds`` runs of it, the two
    taking turns to go first (A B, B A, ...) so that the drift of a busy
    machine hits both alike.  ``run_side(side)`` runs one and returns its
    :func:`drain` result (``jobs``, ``seconds``)."""
    totals = {side: [0, 0.0] for side in sides}
    for round_ in range(rounds):
        for side in sides if round_ % 2 == 0 else sides[::-1]:
            result = run_side(side)
            totals[side][0] += int(result["jobs"])
            totals[side][1] += float(result["seconds"])
    return {side: jobs / seconds for side, (jobs, seconds) in totals.items()}


def compared_stage(
    progress: Progress,
    results: dict[str, Any],
    name: str,
    doing: str,
    measure: Callable[[], dict[str, Any]],
    ratio: tuple[str, str],
) -> None:
    """One comparison stage under a progress line: ``name: doing`` while
    ``measure()`` runs, then the ratio (``ratio``: its key in the figures and
    its label); the figures go to ``results[name]``."""
    task = progress.add_task(f"{name}: {doing}")
    results[name] = measure()
    key, label = ratio
    progress.update(
        task,
        description=f"{name}: {label} throughput {results[name][key]}",
        completed=1,
        total=1,
    )
