"""HTTP views of awa_django: the external-callback receiver and health probes.

Mount them with ``path("awa/", include("awa_django.urls"))`` (names in the
``awa`` namespace: ``awa:callback``, ``awa:healthz``, ``awa:readyz``).  Every
response is JSON, errors included: ``{"error": "..."}`` from the receiver,
``{"status": "unavailable", "reason": "..."}`` from the probes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from django.http import HttpResponseNotAllowed, JsonResponse


def error_response(status: int, message: str) -> JsonResponse:
    """A JSON error: ``{"error": message}`` with ``status``."""
    return JsonResponse({"error": message}, status=status)


def method_not_allowed(method: str | None, allowed: Iterable[str]) -> HttpResponseNotAllowed:
    """405 with an ``Allow`` header and a JSON body (Django's own has an empty body)."""
    permitted = list(allowed)
    body = json.dumps({"error": f"method {method} not allowed; use {', '.join(permitted)}"})
    return HttpResponseNotAllowed(permitted, content=body, content_type="application/json")
