"""Demo jobs: the kind of work a Django project hands to awa_django."""

from __future__ import annotations

import asyncio
import hashlib
import logging

from awa_django import RetryAfter, job

log = logging.getLogger(__name__)


@job(queue="email", priority=1, max_attempts=10)
def send_welcome_email(to: str, name: str, locale: str = "en") -> dict:
    """Render and 'send' a welcome email (logged, nothing leaves the machine)."""
    subject = {"en": "Welcome", "fr": "Bienvenue", "de": "Willkommen"}.get(locale, "Welcome")
    log.info("email to %s: %s, %s!", to, subject, name)
    return {"to": to, "subject": f"{subject}, {name}!"}


@job(queue="reports", kind="build_report", takes_context=True)
def build_report(ctx, report_id: int, sections: list[str]) -> dict:
    """Build a report section by section, stopping early when cancelled."""
    built = []
    for section in sections:
        if ctx.is_cancelled():
            break
        built.append(hashlib.sha256(f"{report_id}:{section}".encode()).hexdigest()[:12])
    return {"report_id": report_id, "sections": built}


@job(queue="default", priority=3)
async def fetch_exchange_rate(base: str, quote: str) -> float:
    """An async handler: pretend to call a rates API."""
    await asyncio.sleep(0.01)
    return 1.0 if base == quote else 1.08


@job(queue="default", max_attempts=3)
def sync_crm_contact(contact_id: int, attempt_budget: int = 1) -> None:
    """Push a contact to a CRM that is sometimes rate limited."""
    if contact_id % 7 == 0:
        raise RetryAfter(30, "CRM rate limit")
