"""Calling the callback receiver from another service (the callbacks how-to; run by the tests).

Only the standard library: the sending side need not run Django.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.request
from typing import Any


# [sign]
def sign(secret: str, body: bytes) -> str:
    """The X-Awa-Signature header for ``body``: hex HMAC-SHA256 keyed with the secret."""
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


# [/sign]


# [send]
def send_callback(
    base_url: str, secret: str, callback_id: str, action: str, **fields: Any
) -> dict[str, Any]:
    """POST ``fields`` to ``<base_url>callbacks/<callback_id>/<action>``, signed.

    ``base_url`` is where the URLconf includes ``awa_django.urls``, e.g.
    ``https://app.example.com/awa/``. The body names the callback, so its
    signature is valid for this callback only. Raises
    ``urllib.error.HTTPError`` for an error status (404: unknown or already
    resolved callback).
    """
    body = json.dumps({"callback_id": callback_id, **fields}).encode()
    request = urllib.request.Request(  # noqa: S310 - base_url is your own https:// URL
        f"{base_url}callbacks/{callback_id}/{action}",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "X-Awa-Signature": sign(secret, body)},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
        return json.loads(response.read())


# [/send]
