"""Calling the callback receiver from another service (the callbacks how-to; run by the tests).

Only the standard library: the sending side need not run Django.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
import urllib.request
from typing import Any


# [sign]
def sign(secret: str, timestamp: int, method: str, path: str, body: bytes) -> str:
    """The X-Awa-Signature header: hex HMAC-SHA256 of "<timestamp>.<METHOD>.<path>." + body."""
    message = f"{timestamp}.{method}.{path}.".encode() + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


# [/sign]


# [send]
def send_callback(
    base_url: str, secret: str, callback_id: str, action: str, **fields: Any
) -> dict[str, Any]:
    """POST ``fields`` as JSON to ``<base_url>callbacks/<callback_id>/<action>``, signed.

    ``base_url`` is where the URLconf includes ``awa_django.urls``, e.g.
    ``https://app.example.com/awa/``. Raises ``urllib.error.HTTPError`` for
    an error status (403: bad signature or clock; 404: unknown or already
    resolved callback).
    """
    url = f"{base_url}callbacks/{callback_id}/{action}"
    body = json.dumps(fields).encode()
    timestamp = int(time.time())
    path = urllib.parse.urlsplit(url).path  # what the receiver sees, without the host
    headers = {
        "Content-Type": "application/json",
        "X-Awa-Timestamp": str(timestamp),
        "X-Awa-Signature": sign(secret, timestamp, "POST", path, body),
    }
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)  # noqa: S310
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - your https URL
        return json.loads(response.read())


# [/send]
