"""The dependencies how-to's example (run by tests/beyond/test_docs_dependencies.py)."""

from __future__ import annotations

from django.db import transaction

from awa_django import job


@job(queue="reports")
def fetch(source: str) -> None:
    """Download one source's data for the nightly report."""


@job(queue="reports")
def build_report(day: str) -> None:
    """Assemble the report once every source is in."""


@job(queue="reports")
def notify(day: str) -> None:
    """Tell the team the report is out (or that it is late)."""


def enqueue_nightly(day: str):
    # [enqueue]
    with transaction.atomic():
        sources = [fetch.enqueue(name) for name in ("billing", "crm", "web")]
        # Runs once all three fetches completed; cancelled if one fails for good.
        report = build_report.using(depends_on=sources).enqueue(day)
        # Runs after the report either way: a failed report counts as settled.
        notify.using(depends_on=[report], on_dependency_failure="run").enqueue(day)
    # [/enqueue]
    return sources, report
