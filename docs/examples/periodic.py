"""Periodic jobs (the periodic how-to; run by the test suite)."""

from __future__ import annotations

from awa_django import job, periodic


# [declare]
@periodic("0 3 * * *", timezone="Europe/Paris")  # every night at 03:00, Paris time
@job(queue="reports")
def nightly_report() -> None:
    """Build yesterday's report."""


# Two schedules of one job: each needs its own name.
@periodic("*/15 * * * *", name="sync_feeds.eu", kwargs={"region": "eu"})
@periodic("0 * * * *", name="sync_feeds.us", kwargs={"region": "us"}, priority=3)
@job(queue="default")
def sync_feeds(region: str) -> int:
    """Fetch the feeds of one region; returns how many items arrived."""
    return 0


# [/declare]
