"""The external-callback receiver: resolve a parked job over HTTP.

``POST callbacks/<uuid>/<action>`` with a JSON object body, where the action
is one of

* ``complete`` -- ``{"payload": <any JSON>}`` (optional) ->
  :func:`awa_django.ops.complete_external`;
* ``fail`` -- ``{"error": "<text>"}`` (required, non-empty) ->
  :func:`awa_django.ops.fail_external`;
* ``retry`` -- empty body or ``{}`` -> :func:`awa_django.ops.retry_external`;
* ``resume`` -- ``{"payload": <any JSON>}`` (optional) ->
  :func:`awa_django.ops.resume_external`.

Any body may also carry ``"callback_id"``; it must then be the id of the URL
(403 otherwise).  The request is
checked in this order, and the first failure answers:

1. method (405 unless POST);
2. size: ``Content-Length`` and the bytes actually read against
   ``AWA["MAX_PAYLOAD_BYTES"]`` (400), before anything is parsed;
3. signature, when ``AWA["CALLBACK_HMAC_SECRET"]`` is set (403 otherwise):
   ``X-Awa-Timestamp`` is the sender's unix time in seconds, within
   ``SIGNATURE_TOLERANCE`` of the receiver's clock, and ``X-Awa-Signature``
   the hex HMAC-SHA256, keyed with one of the secrets, of
   ``b"<timestamp>.<METHOD>.<path>." + raw body`` (:func:`sign`), so a
   signature is good for one callback, one action and a few minutes;
4. JSON: an object, known fields, right types (400); ``callback_id`` (403);
5. the operation: 404 for an unknown or stale callback id, 200 on success.

The view is CSRF-exempt (callers are other services, not browsers) and
answers JSON only.  It takes the database alias from the URLconf's extra
kwargs (``include("awa_django.urls"), {"database": "queue"}``), default
``AWA["DATABASE"]``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from ..conf import awa_settings
from ..exceptions import CallbackNotFound, InvalidJob
from . import error_response, method_not_allowed

SIGNATURE_HEADER = "X-Awa-Signature"
TIMESTAMP_HEADER = "X-Awa-Timestamp"
SIGNATURE_PREFIX = "sha256="
#: Seconds a signed request stays valid either side of the receiver's clock.
SIGNATURE_TOLERANCE = 300
_TIMESTAMP_RE = re.compile(r"[0-9]{1,12}")
_MISSING: Any = object()


class _Rejected(Exception):  # noqa: N818 - internal control flow, never escapes the view
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def sign(secret: str | bytes, timestamp: int | str, method: str, path: str, body: bytes) -> str:
    """The ``X-Awa-Signature`` value of a request: hex HMAC-SHA256 keyed with
    ``secret`` of ``b"<timestamp>.<METHOD>.<path>." + body``."""
    key = secret.encode() if isinstance(secret, str) else secret
    signed = f"{timestamp}.{method.upper()}.{path}.".encode() + body
    return hmac.new(key, signed, hashlib.sha256).hexdigest()


def _timestamp(header: str | None, now: float) -> int:
    """The sender's unix time from ``X-Awa-Timestamp``, refused outside the window."""
    if header is None or not header.strip():
        raise _Rejected(403, f"missing {TIMESTAMP_HEADER} header")
    # ASCII digits only: int() also takes other scripts' digits, isdigit() takes "²".
    if not _TIMESTAMP_RE.fullmatch(header.strip()):
        raise _Rejected(403, f"{TIMESTAMP_HEADER} must be unix time in whole seconds")
    timestamp = int(header.strip())
    if abs(now - timestamp) > SIGNATURE_TOLERANCE:
        raise _Rejected(
            403,
            f"{TIMESTAMP_HEADER} is more than {SIGNATURE_TOLERANCE} s away from the "
            "receiver's clock (stale or replayed request, or a skewed clock)",
        )
    return timestamp


def _check_signature(request: HttpRequest, secrets: Sequence[bytes], body: bytes) -> None:
    header = request.headers.get(SIGNATURE_HEADER)
    if header is None or not header.strip():
        raise _Rejected(403, f"missing {SIGNATURE_HEADER} header")
    timestamp = _timestamp(request.headers.get(TIMESTAMP_HEADER), time.time())
    given = header.strip()
    if given[: len(SIGNATURE_PREFIX)].lower() == SIGNATURE_PREFIX:
        given = given[len(SIGNATURE_PREFIX) :]
    # Bytes on both sides: compare_digest refuses non-ASCII str, and a header
    # may hold anything (even a lone surrogate, which UTF-8 cannot encode).
    given_bytes = given.lower().encode("utf-8", "replace")
    method = request.method or "POST"
    matches = False
    for secret in secrets:  # every key, whatever matches: no early exit to time
        expected = sign(secret, timestamp, method, request.path, body).encode()
        matches |= hmac.compare_digest(given_bytes, expected)
    if not matches:
        raise _Rejected(
            403, f"{SIGNATURE_HEADER} does not match this request (timestamp, method, path, body)"
        )


def _read_body(request: HttpRequest, limit: int) -> bytes:
    """The raw body, refusing one over ``limit`` bytes before reading or parsing it."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared:
        try:
            length = int(declared)
        except ValueError:
            length = -1
        if length < 0:
            raise _Rejected(400, "invalid Content-Length header")
        if length > limit:
            raise _Rejected(400, _too_large(limit))
    body = request.read(limit + 1)
    if len(body) > limit:
        raise _Rejected(400, _too_large(limit))
    return body


def _too_large(limit: int) -> str:
    return f"request body is larger than AWA['MAX_PAYLOAD_BYTES'] ({limit} bytes)"


def _no_constant(name: str) -> Any:
    # NaN and Infinity are not JSON, and PostgreSQL would refuse them later.
    raise json.JSONDecodeError(f"{name} is not valid JSON", name, 0)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _parse(body: bytes) -> dict[str, Any]:
    if not body.strip():
        return {}
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a 5000-digit number
        raise _Rejected(400, f"malformed JSON: {exc}") from None
    except RecursionError:
        raise _Rejected(400, "malformed JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise _Rejected(400, f"the body must be a JSON object, got {_json_type(data)}")
    return data


def _check_binding(data: Mapping[str, Any], callback_id: uuid.UUID) -> None:
    """A body naming a callback must name the one of the URL (replay onto another id)."""
    if "callback_id" not in data:
        return
    named = data["callback_id"]
    try:
        same = isinstance(named, str) and uuid.UUID(named) == callback_id
    except ValueError:
        same = False
    if not same:
        raise _Rejected(403, "the body's callback_id is not the callback of the URL")


# --- the four actions: which fields each accepts, and the ops call --------------


@dataclass(frozen=True)
class _Action:
    status: str
    fields: frozenset[str]
    call: Callable[[uuid.UUID, Mapping[str, Any], str | None], None]


def _complete(callback_id: uuid.UUID, data: Mapping[str, Any], database: str | None) -> None:
    from .. import ops

    ops.complete_external(callback_id, data.get("payload"), database=database)


def _fail(callback_id: uuid.UUID, data: Mapping[str, Any], database: str | None) -> None:
    from .. import ops

    error = data.get("error", _MISSING)
    if error is _MISSING:
        raise _Rejected(400, "fail needs an 'error' field (a non-empty string)")
    if not isinstance(error, str):
        raise _Rejected(400, f"'error' must be a non-empty string, got {_json_type(error)}")
    if not error:
        raise _Rejected(400, "'error' must be a non-empty string, got an empty one")
    ops.fail_external(callback_id, error, database=database)


def _retry(callback_id: uuid.UUID, data: Mapping[str, Any], database: str | None) -> None:
    from .. import ops

    ops.retry_external(callback_id, database=database)


def _resume(callback_id: uuid.UUID, data: Mapping[str, Any], database: str | None) -> None:
    from .. import ops

    ops.resume_external(callback_id, data.get("payload"), database=database)


ACTIONS: Mapping[str, _Action] = {
    "complete": _Action("completed", frozenset({"payload"}), _complete),
    "fail": _Action("failed", frozenset({"error"}), _fail),
    "retry": _Action("retried", frozenset(), _retry),
    "resume": _Action("resumed", frozenset({"payload"}), _resume),
}


@csrf_exempt
def callback(
    request: HttpRequest, callback_id: uuid.UUID, action: str, database: str | None = None
) -> HttpResponse:
    """Resolve the callback ``callback_id`` with ``action`` (see the module docstring)."""
    if request.method != "POST":
        return method_not_allowed(request.method, ["POST"])
    spec = ACTIONS.get(action)
    if spec is None:
        return error_response(404, f"unknown action {action!r}; use {', '.join(ACTIONS)}")
    settings = awa_settings()
    try:
        body = _read_body(request, settings.max_payload_bytes)
        if settings.callback_hmac_secret is not None:
            _check_signature(request, settings.callback_hmac_secret, body)
        data = _parse(body)
        _check_binding(data, callback_id)
        unknown = set(data) - spec.fields - {"callback_id"}
        if unknown:
            accepted = ", ".join(sorted({*spec.fields, "callback_id"}))
            raise _Rejected(
                400, f"unknown field(s) {', '.join(sorted(unknown))}; {action} accepts {accepted}"
            )
        spec.call(callback_id, data, database)
    except _Rejected as rejected:
        return error_response(rejected.status, rejected.message)
    except CallbackNotFound:
        return error_response(404, f"no live callback {callback_id}")
    except InvalidJob as exc:
        return error_response(400, str(exc))
    return JsonResponse({"status": spec.status, "callback_id": str(callback_id)})
