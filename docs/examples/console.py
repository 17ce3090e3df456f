"""Descriptors for the operator console (the console how-to; run by the test suite)."""

from __future__ import annotations

from awa_django import Descriptor, job, ops

# [settings]
AWA = {
    "QUEUES": {
        "email": {
            "max_workers": 20,
            "descriptor": {
                "display_name": "Email",
                "description": "Transactional outbound email",
                "owner": "messaging",
                "docs_url": "https://wiki.example.com/email",
                "tags": ["customer-facing"],
            },
        },
    },
}
# [/settings]


# [job]
@job(queue="email", descriptor=Descriptor(display_name="Send email", owner="messaging"))
def send_email(to: str) -> None:
    """Deliver one transactional email."""


# [/job]


# [search]
def emails_to(address: str, *, pages: int = 10) -> list[int]:
    """Ids of the emails sent with ``to=address``, newest first: at most
    ``pages`` bounded searches back through the history."""
    found: list[int] = []
    before = None
    for _ in range(pages):
        page = ops.browse_jobs(args_contains={"to": address}, before=before)
        found += [job.id for job in page.jobs]
        if page.older is None:
            break
        before = page.older
    return found


# [/search]
