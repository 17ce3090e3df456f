"""Descriptors for the operator console (the console how-to; run by the test suite)."""

from __future__ import annotations

from awa_django import Descriptor, job

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
