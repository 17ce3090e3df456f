"""The HTTP callback receiver under fuzzed requests: every request gets a
JSON 4xx (or its 2xx), never a 500, and a refused one changes nothing.

Hypothesis sends arbitrary bytes, arbitrary JSON (odd unicode, deep
nesting, wrong types) and forged signatures to every action; the last test
aims at a really parked attempt and checks it stays parked until the one
correctly signed request resolves it, after which a replay is a 404.
"""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import examples

from .test_callback_views import (
    ACTIONS,
    SECRET,
    VALID,
    committed,  # noqa: F401  (fixture)
    parked,
    post,
    signature_headers,
    state,
    with_awa,
)

FUZZ = settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
REFUSED = {400, 403, 404, 405, 413}

any_text = st.text(st.characters(codec=None, min_codepoint=0), max_size=16)
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), any_text),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)
bodies = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.sampled_from(["payload", "error", "callback_id", "x"]), json_values).map(
        lambda d: json.dumps(d).encode()
    ),
)
signatures = st.one_of(st.none(), any_text, st.binary(max_size=40).map(bytes.hex))
timestamps = st.one_of(
    st.none(),
    any_text,
    st.sampled_from(["\u00b2", "1e309", "-0", str(2**63), "NaN", "0", "-1"]),
    st.integers().map(str),
)


def assert_json_refusal(response) -> None:
    assert response.status_code in REFUSED, (response.status_code, response.content)
    assert response["Content-Type"] == "application/json"
    body = json.loads(response.content)
    assert isinstance(body.get("error"), str) and body["error"]


@pytest.mark.django_db
@FUZZ
@given(
    action=st.sampled_from([*ACTIONS, "explode"]),
    body=bodies,
    signature=signatures,
    timestamp=timestamps,
)
def test_fuzzed_requests_for_unknown_callbacks_are_json_4xx(action, body, signature, timestamp):
    headers = {} if signature is None else {"X-Awa-Signature": signature}
    if timestamp is not None:
        headers["X-Awa-Timestamp"] = timestamp
    for secret in (None, SECRET):
        with with_awa(CALLBACK_HMAC_SECRET=secret):
            assert_json_refusal(post(uuid.uuid4(), action, body, **headers))


@pytest.mark.django_db
@FUZZ
@given(body=bodies, depth=st.integers(1, 3000))
def test_signed_fuzzed_bodies_reach_validation_and_are_refused_cleanly(body, depth):
    # Deep nesting, correctly signed, so it passes the signature check.
    nested = b'{"payload": ' + b"[" * depth + b"]" * depth + b"}"
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        for data in (body, nested):
            callback_id = uuid.uuid4()
            headers = signature_headers(callback_id, "complete", data)
            assert_json_refusal(post(callback_id, "complete", data, **headers))


@given(signature=signatures, body=bodies, timestamp=timestamps)
@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
def _forged(signature, body, timestamp, callback_id, seen):
    genuine = signature_headers(callback_id, "complete", body)
    if signature is not None and signature == genuine["X-Awa-Signature"]:
        return  # Hypothesis found the real signature: not a forgery
    headers = {} if signature is None else {"X-Awa-Signature": signature}
    headers["X-Awa-Timestamp"] = genuine["X-Awa-Timestamp"] if timestamp is None else timestamp
    response = post(callback_id, "complete", body, **headers)
    assert response.status_code in {400, 403}, response.content
    seen.add(response.status_code)


def test_forged_requests_leave_a_parked_attempt_parked_and_a_replay_is_404(committed, queue):  # noqa: F811
    ((job_id, callback_id),) = parked(queue)
    seen: set[int] = set()
    with with_awa(CALLBACK_HMAC_SECRET=SECRET):
        _forged(callback_id=callback_id, seen=seen)
        assert 403 in seen
        assert state(job_id) == "waiting_external"

        data = json.dumps(VALID["complete"]).encode()
        genuine = signature_headers(callback_id, "complete", data)
        assert post(callback_id, "complete", data, **genuine).status_code == 200
        assert state(job_id) == "completed"
        replay = post(callback_id, "complete", data, **genuine)
        assert_json_refusal(replay)
        assert replay.status_code == 404
