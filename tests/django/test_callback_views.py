"""The HTTP callback receiver (awa:callback), through Django's test client.

The first tests reject requests before any database access (the tests have
no database, so a query would fail them): method, size, JSON shape,
signature, the body's callback_id.  The next ones reach ``ops`` with ids no
attempt registered (404).  The last ones park real attempts -- a handler
calls ``ctx.register_callback`` and raises ``WaitForCallback``, run by a real
in-process worker -- and resolve them over HTTP.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import uuid

import pytest
from django.conf import settings
from django.test import Client, RequestFactory, override_settings
from django.urls import reverse

import awa_django
from awa_django import WaitForCallback, conf, job, ops
from awa_django.storage.leases import CALLBACK_ACTIONS
from awa_django.views import callbacks
from awa_django.views.callbacks import sign
from docs.examples import callback_signing
from tests.conftest import ROOT, database_url, reset_queue_storage, run_burst, wait_for

SECRET = "s3cret-for-tests"
ACTIONS = ["complete", "fail", "retry", "resume"]
# A body each action accepts.
VALID = {
    "complete": {"payload": {"ok": True}},
    "fail": {"error": "remote side gave up"},
    "retry": {},
    "resume": {"payload": [1, 2, 3]},
}


def url(callback_id, action: str = "complete") -> str:
    return reverse("awa:callback", kwargs={"callback_id": callback_id, "action": action})


def post(callback_id, action: str = "complete", body: bytes | dict | None = None, **headers):
    data = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
    # enforce_csrf_checks: the receiver must be CSRF-exempt.
    client = Client(enforce_csrf_checks=True)
    return client.post(
        url(callback_id, action), data=data, content_type="application/json", headers=headers
    )


def signature_headers(
    callback_id, action: str, data: bytes, secret: str | bytes = SECRET, at: int | None = None
) -> dict[str, str]:
    """The two headers of a request signed for ``callback_id`` and ``action`` at ``at``."""
    timestamp = int(time.time()) if at is None else at
    signature = sign(secret, timestamp, "POST", url(callback_id, action), data)
    return {"X-Awa-Timestamp": str(timestamp), "X-Awa-Signature": signature}


def signed(callback_id, action: str, body: dict, secret: str | bytes = SECRET, **headers):
    data = json.dumps(body).encode()
    return post(
        callback_id,
        action,
        data,
        **{**signature_headers(callback_id, action, data, secret), **headers},
    )


def with_awa(**keys):
    return override_settings(AWA={**settings.AWA, **keys})


def assert_error(response, status: int, fragment: str = "") -> str:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    assert fragment in body["error"]
    return body["error"]


# --- rejected before anything is read from the database -------------------------


def test_the_receiver_offers_every_action_the_storage_knows():
    assert set(callbacks.ACTIONS) == set(CALLBACK_ACTIONS) == set(ACTIONS)


def test_the_url_is_named_in_the_awa_namespace():
    callback_id = uuid.uuid4()
    assert url(callback_id, "fail") == f"/awa/callbacks/{callback_id}/fail"


@pytest.mark.parametrize("action", ACTIONS)
@pytest.mark.parametrize("method", ["get", "head", "put", "patch", "delete", "options"])
def test_only_post_is_allowed(action, method):
    response = getattr(Client(), method)(url(uuid.uuid4(), action))
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    if method != "head":
        assert_error(response, 405, "use POST")


def test_an_unknown_action_is_404_in_json():
    assert_error(post(uuid.uuid4(), "explode", {}), 404, "unknown action 'explode'")


def test_an_id_that_is_not_a_uuid_matches_no_url():
    response = Client().post("/awa/callbacks/not-a-uuid/complete", data=b"{}", content_type="x")
    assert response.status_code == 404


@pytest.mark.parametrize(
    "body",
    [b"{", b"{'payload': 1}", b'{"payload": }', b"\xff\xfe\x00", b'{"payload": NaN}', b"[1"],
)
def test_malformed_json_is_400(body):
    assert_error(post(uuid.uuid4(), "complete", body), 400, "malformed JSON")


@pytest.mark.parametrize("body", [b"[]", b'[{"payload": 1}]', b"1", b'"done"', b"null", b"true"])
@pytest.mark.parametrize("action", ACTIONS)
def test_a_body_that_is_not_an_object_is_400(action, body):
    message = assert_error(post(uuid.uuid4(), action, body), 400, "must be a JSON object, got ")
    assert message.endswith(("an array", "a number", "a string", "null", "a boolean"))


@pytest.mark.parametrize(
    "body", [{}, {"error": ""}, {"error": False}, {"error": None}, {"error": 3}, {"error": ["x"]}]
)
def test_fail_without_a_non_empty_error_string_is_400(body):
    message = assert_error(post(uuid.uuid4(), "fail", body), 400)
    assert "'error'" in message


def test_fail_with_an_empty_body_is_400():
    assert_error(post(uuid.uuid4(), "fail", b""), 400, "needs an 'error' field")


@pytest.mark.parametrize("action", ACTIONS)
def test_unknown_fields_are_400(action):
    message = assert_error(post(uuid.uuid4(), action, {**VALID[action], "paylod": 1}), 400)
    assert message.startswith("unknown field(s) paylod;")


def test_a_body_over_max_payload_bytes_is_400():
    body = json.dumps({"payload": "x" * 100}).encode()
    with with_awa(MAX_PAYLOAD_BYTES=len(body) - 1):
        message = assert_error(post(uuid.uuid4(), "complete", body), 400)
    assert (
        message == f"request body is larger than AWA['MAX_PAYLOAD_BYTES'] ({len(body) - 1} bytes)"
    )


def test_a_body_at_max_payload_bytes_passes_the_size_check():
    body = json.dumps({"payload": "x" * 100}).encode()
    # The secret makes the next check (the signature) answer, before any query.
    with with_awa(MAX_PAYLOAD_BYTES=len(body), CALLBACK_HMAC_SECRET=SECRET):
        assert_error(post(uuid.uuid4(), "complete", body), 403, "missing X-Awa-Signature")


def test_the_size_is_checked_before_the_signature():
    body = json.dumps({"payload": "x" * 100}).encode()
    with with_awa(MAX_PAYLOAD_BYTES=10, CALLBACK_HMAC_SECRET=SECRET):
        assert_error(post(uuid.uuid4(), "complete", body), 400, "MAX_PAYLOAD_BYTES")


def test_a_body_without_content_length_is_limited_by_what_is_read():
    """E.g. a chunked upload through ASGI: the stream is read at most one byte past the limit."""
    body = json.dumps({"payload": "x" * 100}).encode()
    callback_id = uuid.uuid4()
    request = RequestFactory().post(url(callback_id), data=body, content_type="application/json")
    del request.META["CONTENT_LENGTH"]
    request._stream = io.BytesIO(body)
    with with_awa(MAX_PAYLOAD_BYTES=50):
        response = callbacks.callback(request, callback_id=callback_id, action="complete")
    assert_error(response, 400, "MAX_PAYLOAD_BYTES")
    assert request._stream.tell() == 51


@pytest.mark.parametrize("length", ["lots", "-1"])
def test_an_invalid_content_length_is_400(length):
    response = Client().generic(
        "POST", url(uuid.uuid4()), b"{}", content_type="application/json", CONTENT_LENGTH=length
    )
    assert_error(response, 400, "Content-Length")


@pytest.mark.parametrize("action", ACTIONS)
def test_with_a_secret_an_unsigned_request_is_403(action):
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        assert_error(post(uuid.uuid4(), action, VALID[action]), 403, "missing X-Awa-Signature")


@pytest.mark.parametrize(
    "signature",
    [
        "",
        "   ",
        "0" * 64,
        "sha256=" + "0" * 64,
        "not hex at all",
        "sha256=",
        "\u00e9t\u00e9",  # not ASCII: compared as bytes, never raises
    ],
)
def test_with_a_secret_a_wrong_signature_is_403(signature):
    headers = {"X-Awa-Timestamp": str(int(time.time())), "X-Awa-Signature": signature}
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        response = post(uuid.uuid4(), "complete", VALID["complete"], **headers)
    assert response.status_code == 403
    assert_error(response, 403, "X-Awa-Signature")


def test_with_a_secret_a_signature_made_with_another_key_is_403():
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        response = signed(uuid.uuid4(), "complete", VALID["complete"], secret="guessed")
    assert_error(response, 403, "does not match this request")


def test_with_a_secret_the_signature_of_another_body_is_403():
    callback_id = uuid.uuid4()
    other = json.dumps({"payload": "other"}).encode()
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        response = post(
            callback_id,
            "complete",
            {"payload": "this"},
            **signature_headers(callback_id, "complete", other),
        )
    assert_error(response, 403, "does not match this request")


def test_the_signature_is_checked_before_the_json():
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        assert_error(post(uuid.uuid4(), "complete", b"{not json"), 403, "missing X-Awa-Signature")


@pytest.mark.urls("docs.examples.callback_urls")
def test_the_documented_urlconf_mounts_the_receiver():
    callback_id = uuid.uuid4()
    assert url(callback_id, "retry") == f"/awa/callbacks/{callback_id}/retry"
    assert reverse("awa:healthz") == "/awa/healthz"


@pytest.mark.parametrize(
    "named",
    [str(uuid.uuid4()), "not-a-uuid", 7, None, ["x"]],
    # Stable ids: xdist workers must collect the same names.
    ids=["another-uuid", "not-a-uuid", "int", "null", "list"],
)
def test_a_body_naming_another_callback_is_403(named):
    callback_id = uuid.uuid4()
    body = {"callback_id": named, "payload": 1}
    assert_error(post(callback_id, "complete", body), 403, "callback_id")
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        # Correctly signed, still refused: the signature covers another callback.
        assert_error(signed(callback_id, "complete", body), 403, "callback_id")


# --- reaching ops with ids nobody registered: 404 ---------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("action", ACTIONS)
def test_an_unknown_callback_is_404(action):
    callback_id = uuid.uuid4()
    assert_error(post(callback_id, action, VALID[action]), 404, str(callback_id))


@pytest.mark.django_db
@pytest.mark.parametrize("body", [b"", b"{}", b"  \n"])
def test_retry_accepts_an_empty_body(body):
    assert_error(post(uuid.uuid4(), "retry", body), 404, "no live callback")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "transform",
    [str, str.upper, lambda hexdigest: "sha256=" + hexdigest, lambda h: "SHA256=" + h.upper()],
    ids=["lower", "upper", "prefix", "prefix-upper"],
)
def test_a_valid_signature_reaches_the_operation(transform):
    callback_id = uuid.uuid4()
    data = json.dumps({"callback_id": str(callback_id), "payload": {"n": 1}}).encode()
    headers = signature_headers(callback_id, "complete", data)
    headers["X-Awa-Signature"] = transform(headers["X-Awa-Signature"])
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        response = post(callback_id, "complete", data, **headers)
    assert_error(response, 404, "no live callback")


@pytest.mark.django_db
def test_a_signed_empty_body_reaches_the_operation():
    callback_id = uuid.uuid4()
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        response = post(callback_id, "retry", b"", **signature_headers(callback_id, "retry", b""))
    assert_error(response, 404, "no live callback")


@pytest.mark.django_db
def test_the_body_may_name_its_own_callback_in_any_case():
    callback_id = uuid.uuid4()
    body = {"callback_id": str(callback_id).upper(), "error": "x"}
    assert_error(post(callback_id, "fail", body), 404, "no live callback")


# --- real parked callbacks, resolved over HTTP ------------------------------------


@job(kind="tests.callback_views.park", takes_context=True, max_attempts=3)
def park(ctx, timeout: float = 60.0) -> None:
    """Register a callback and give the worker slot back until it is resolved."""
    ctx.register_callback(timeout=timeout)
    raise WaitForCallback()


@job(kind="tests.callback_views.wait_inside", takes_context=True, max_attempts=1)
def wait_inside(ctx) -> dict:
    """Register a callback and block in the handler until it is resumed."""
    callback_id = ctx.register_callback(timeout=60)
    payload = ctx.wait_for_callback(callback_id, timeout=30)
    return {"resumed_with": payload}


@pytest.fixture
def committed(transactional_db, reset_awa):
    """Committed data, so an in-process worker sees it; empty queues before and after."""
    reset_queue_storage()


def callback_of(job_id: int) -> uuid.UUID | None:
    info = ops.get_job(job_id)
    return info.callback_id if info is not None else None


def parked(
    queue: str, count: int = 1, timeout: float = 60.0, max_attempts: int = 3
) -> list[tuple[int, uuid.UUID]]:
    """``count`` jobs parked in waiting_external by a real worker: (job id, callback id)."""
    parking = park.using(queue=queue, max_attempts=max_attempts)
    ids = awa_django.enqueue_many([parking.prepare(timeout) for _ in range(count)])
    run_burst(queue)
    wait_for(lambda: all(ops.get_job(i).state == "waiting_external" for i in ids))
    found = []
    for job_id in ids:
        callback_id = callback_of(job_id)
        assert isinstance(callback_id, uuid.UUID), job_id
        found.append((job_id, callback_id))
    return found


def state(job_id: int) -> str:
    return ops.get_job(job_id).state


def test_complete_resolves_once_then_404(committed, queue):
    ((job_id, callback_id),) = parked(queue)
    response = post(callback_id, "complete", {"payload": {"invoice": 42}})
    assert response.status_code == 200
    assert response.json() == {"status": "completed", "callback_id": str(callback_id)}
    info = ops.get_job(job_id)
    assert (info.state, info.return_value) == ("completed", {"invoice": 42})

    # Double completion: the callback is no longer live, nothing changes.
    assert_error(post(callback_id, "complete", {"payload": "again"}), 404, str(callback_id))
    for action in ("fail", "retry", "resume"):
        assert_error(post(callback_id, action, VALID[action]), 404)
    assert ops.get_job(job_id).return_value == {"invoice": 42}


def test_complete_without_payload(committed, queue):
    ((job_id, callback_id),) = parked(queue)
    assert post(callback_id, "complete", b"").status_code == 200
    info = ops.get_job(job_id)
    assert (info.state, info.return_value) == ("completed", None)


def test_fail_fails_the_job_with_the_error(committed, queue):
    ((job_id, callback_id),) = parked(queue)
    response = post(callback_id, "fail", {"error": "card declined"})
    assert response.status_code == 200
    assert response.json()["status"] == "failed"
    info = ops.get_job(job_id)
    assert info.state == "failed"
    assert "card declined" in info.errors[-1]["message"]
    assert_error(post(callback_id, "fail", {"error": "again"}), 404)


def test_retry_runs_the_job_again_and_the_old_id_goes_stale(committed, queue):
    ((job_id, callback_id),) = parked(queue)
    response = post(callback_id, "retry", b"")
    assert response.status_code == 200
    assert response.json()["status"] == "retried"
    assert state(job_id) not in ("waiting_external", "completed", "failed")
    assert_error(post(callback_id, "complete", {}), 404)

    run_burst(queue)  # the new attempt parks again, with a new callback
    wait_for(lambda: state(job_id) == "waiting_external")
    new_id = callback_of(job_id)
    assert new_id is not None and new_id != callback_id
    assert_error(post(callback_id, "complete", {}), 404)  # stale
    assert post(new_id, "complete", {"payload": 2}).status_code == 200
    info = ops.get_job(job_id)
    assert (info.state, info.attempt, info.return_value) == ("completed", 2, 2)


def test_retry_at_the_last_attempt_runs_the_job_again(committed, queue):
    """The documented promise holds at ``max_attempts`` too: a new attempt
    runs (it used to be failed without running, past the limit)."""
    ((job_id, callback_id),) = parked(queue, max_attempts=1)
    assert post(callback_id, "retry", b"").status_code == 200

    run_burst(queue)  # the new attempt runs, and parks again
    wait_for(lambda: state(job_id) in ("waiting_external", "failed"))
    info = ops.get_job(job_id)
    assert (info.state, info.attempt) == ("waiting_external", 2)
    assert post(info.callback_id, "complete", {"payload": 2}).status_code == 200
    assert state(job_id) == "completed"


def test_resume_of_a_parked_attempt_completes_it(committed, queue):
    ((job_id, callback_id),) = parked(queue)
    response = post(callback_id, "resume", {"payload": {"step": 2}})
    assert response.status_code == 200
    assert response.json()["status"] == "resumed"
    info = ops.get_job(job_id)
    assert (info.state, info.return_value) == ("completed", {"step": 2})


def test_resume_hands_the_payload_to_a_waiting_handler(committed, queue):
    ref = wait_inside.using(queue=queue).enqueue()
    errors: list[BaseException] = []

    def work():
        try:
            run_burst(queue)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    try:
        callback_id = wait_for(lambda: callback_of(ref.id))
        # Registered, then blocked in the sequential wait: waiting_external.
        wait_for(lambda: state(ref.id) == "waiting_external")
        response = post(callback_id, "resume", {"payload": "go"})
        assert response.status_code == 200
    finally:
        worker.join(timeout=60)
    assert not worker.is_alive() and errors == []
    info = ops.get_job(ref.id)
    assert (info.state, info.return_value) == ("completed", {"resumed_with": "go"})


def test_a_forged_signature_changes_nothing(committed, queue):
    ((job_id, callback_id),) = parked(queue)
    body = {"callback_id": str(callback_id), "payload": "forged"}
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        assert_error(signed(callback_id, "complete", body, secret="guess"), 403)
        assert_error(post(callback_id, "complete", body), 403)
        assert (state(job_id), callback_of(job_id)) == ("waiting_external", callback_id)
        assert signed(callback_id, "complete", body).status_code == 200
    assert ops.get_job(job_id).return_value == "forged"


def test_a_signed_body_naming_its_callback_cannot_be_replayed_onto_another(committed, queue):
    (job_a, callback_a), (job_b, callback_b) = parked(queue, 2)
    data = json.dumps({"callback_id": str(callback_a), "payload": "for a"}).encode()
    headers = signature_headers(callback_a, "complete", data)
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        assert_error(post(callback_b, "complete", data, **headers), 403)
        assert (state(job_b), callback_of(job_b)) == ("waiting_external", callback_b)
        assert post(callback_a, "complete", data, **headers).status_code == 200
        assert_error(post(callback_a, "complete", data, **headers), 404)  # replayed: spent
    assert ops.get_job(job_a).return_value == "for a"
    assert state(job_b) == "waiting_external"


def test_a_signature_is_bound_to_one_callback_and_one_action(committed, queue):
    """Issue 30: a signed ``{}`` for one callback's retry resolved two others."""
    (job_a, callback_a), (job_b, callback_b), (job_c, callback_c) = parked(queue, 3)
    headers = signature_headers(callback_a, "retry", b"{}")
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        # The same headers and body on another callback, or another action.
        assert_error(post(callback_b, "retry", b"{}", **headers), 403, "does not match")
        assert_error(post(callback_c, "complete", b"{}", **headers), 403, "does not match")
        assert_error(post(callback_a, "complete", b"{}", **headers), 403, "does not match")
        assert (state(job_b), state(job_c)) == ("waiting_external", "waiting_external")
        assert (callback_of(job_b), callback_of(job_c)) == (callback_b, callback_c)
        assert post(callback_a, "retry", b"{}", **headers).status_code == 200
    assert state(job_a) != "waiting_external"


def test_the_body_only_signature_is_no_longer_accepted(committed, queue):
    ((job_id, callback_id),) = parked(queue)
    data = json.dumps({"payload": "old scheme"}).encode()
    body_only = hmac.new(SECRET.encode(), data, hashlib.sha256).hexdigest()
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        assert_error(post(callback_id, "complete", data, **{"X-Awa-Signature": body_only}), 403)
        now = str(int(time.time()))
        headers = {"X-Awa-Signature": body_only, "X-Awa-Timestamp": now}
        assert_error(post(callback_id, "complete", data, **headers), 403, "does not match")
    assert state(job_id) == "waiting_external"


@pytest.mark.parametrize("skew", [-301, 301, -10_000, 10**9])
def test_a_signature_outside_the_time_window_is_403(committed, queue, skew):
    ((job_id, callback_id),) = parked(queue)
    data = b'{"payload": 1}'
    at = int(time.time()) + skew
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        response = post(
            callback_id, "complete", data, **signature_headers(callback_id, "complete", data, at=at)
        )
        assert_error(response, 403, "X-Awa-Timestamp is more than 300 s away")
    assert state(job_id) == "waiting_external"


@pytest.mark.parametrize("skew", [-290, 290])
@pytest.mark.django_db
def test_a_signature_inside_the_time_window_is_accepted(skew):
    callback_id = uuid.uuid4()
    at = int(time.time()) + skew
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        headers = signature_headers(callback_id, "retry", b"", at=at)
        assert_error(post(callback_id, "retry", b"", **headers), 404, "no live callback")


@pytest.mark.parametrize(
    "timestamp", ["", " ", "soon", "1.5", "-1", "²", "\u0661\u0662", "1e9", "NaN", str(2**63)]
)
def test_a_malformed_timestamp_is_403(timestamp):
    callback_id = uuid.uuid4()
    headers = signature_headers(callback_id, "retry", b"")
    headers["X-Awa-Timestamp"] = timestamp
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        assert_error(post(callback_id, "retry", b"", **headers), 403, "X-Awa-Timestamp")


@pytest.mark.django_db
@pytest.mark.parametrize("signer", [0, 1, 2])
def test_every_secret_of_a_rotation_list_verifies(signer):
    secrets = ["new-key", b"\xff\x00old binary key", "older"]
    callback_id = uuid.uuid4()
    with with_awa(CALLBACK_HMAC_SECRET=secrets):
        response = signed(callback_id, "retry", {}, secret=secrets[signer])
        assert_error(response, 404, "no live callback")
        assert_error(signed(callback_id, "retry", {}, secret="retired"), 403, "does not match")


def test_a_bytes_secret_that_is_not_utf8_loads_and_verifies():
    """Issue 30 point 8: a bytes secret crashed settings loading (UnicodeDecodeError)."""
    secret = bytes(range(256))
    with with_awa(CALLBACK_HMAC_SECRET=secret):
        assert conf.awa_settings().callback_hmac_secret == (secret,)
        assert_error(signed(uuid.uuid4(), "retry", {}, secret=b"other"), 403, "does not match")


def test_a_cancelled_job_s_callback_is_stale(committed, queue):
    ((job_id, callback_id),) = parked(queue)
    assert ops.cancel_job(job_id) is True
    assert_error(post(callback_id, "complete", {"payload": "late"}), 404, str(callback_id))
    assert state(job_id) == "cancelled"


@pytest.mark.skipif(
    "CALLBACK_RESCUE_INTERVAL" in conf.NOT_IMPLEMENTED, reason="callback timeouts are not rescued"
)
def test_a_callback_the_leader_timed_out_is_stale(committed, queue):
    ((job_id, callback_id),) = parked(queue, timeout=0.5)
    fast = {"CALLBACK_RESCUE_INTERVAL": 0.2, "PROMOTE_INTERVAL": 0.1}
    env = dict(os.environ, DATABASE_URL=database_url(), AWA_SETTINGS_JSON=json.dumps(fast))
    leader = subprocess.Popen(
        [sys.executable, str(ROOT / "testproject" / "manage.py"), "awa_maintenance"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: state(job_id) != "waiting_external", timeout=60)
    finally:
        leader.terminate()
        leader.wait(timeout=30)
    assert_error(post(callback_id, "complete", {"payload": "late"}), 404, str(callback_id))
    assert ops.get_job(job_id).return_value is None


# --- the sending side of the how-to, over real HTTP -------------------------------


def test_the_documented_sender_signs_requests_the_receiver_accepts(committed, queue, live_server):
    (job_a, callback_a), (job_b, callback_b) = parked(queue, 2)
    base = f"{live_server.url}/awa/"
    data = b'{"payload": 1}'
    path = f"/awa/callbacks/{callback_a}/complete"
    assert callback_signing.sign(SECRET, 1700000000, "POST", path, data) == sign(
        SECRET, 1700000000, "POST", path, data
    )
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        answer = callback_signing.send_callback(
            base, SECRET, str(callback_a), "complete", payload={"ok": 1}
        )
        assert answer == {"status": "completed", "callback_id": str(callback_a)}
        with pytest.raises(urllib.error.HTTPError) as spent:
            callback_signing.send_callback(base, SECRET, str(callback_a), "complete")
        with spent.value:
            assert spent.value.code == 404
            assert json.loads(spent.value.read())["error"].startswith("no live callback")
        with pytest.raises(urllib.error.HTTPError) as forged:
            callback_signing.send_callback(base, "wrong", str(callback_b), "fail", error="x")
        with forged.value:
            assert forged.value.code == 403
        answer = callback_signing.send_callback(
            base, SECRET, str(callback_b), "fail", error="gave up"
        )
        assert answer["status"] == "failed"
    assert ops.get_job(job_a).return_value == {"ok": 1}
    assert state(job_b) == "failed"


@pytest.mark.skipif(
    not (shutil.which("curl") and shutil.which("openssl")), reason="needs curl and openssl"
)
def test_the_documented_curl_recipe_completes_a_callback(committed, queue, live_server):
    ((job_id, callback_id),) = parked(queue)
    script = ROOT / "docs" / "examples" / "callback_curl.sh"
    env = {
        **os.environ,
        "AWA_URL": f"{live_server.url}/awa",
        "AWA_CALLBACK_SECRET": SECRET,
        "CALLBACK_ID": str(callback_id),
    }
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        done = subprocess.run(
            ["sh", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr + done.stdout
        assert json.loads(done.stdout) == {"status": "completed", "callback_id": str(callback_id)}
        again = subprocess.run(
            ["sh", str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
        )
    assert again.returncode != 0  # --fail-with-body: the callback is spent
    assert json.loads(again.stdout)["error"].startswith("no live callback")
    assert ops.get_job(job_id).return_value == {"invoice": 42}
    # A wrong secret is refused.
    with with_awa(CALLBACK_HMAC_SECRET="another"):
        ((_, other),) = parked(queue)
        forged = subprocess.run(
            ["sh", str(script)],
            env={**env, "CALLBACK_ID": str(other)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert forged.returncode != 0
    assert json.loads(forged.stdout)["error"].startswith("X-Awa-Signature does not match")
