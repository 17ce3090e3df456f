"""Issue 30 point 8: inputs the payload limit ignored, a unique key that crashed,
and numbers the console turned into a 500.

Each test failed on the code before the fix: metadata, tags and an
ordering key of 5 MiB each were accepted; a unique job whose arguments hold
a lone surrogate raised ``UnicodeEncodeError``; ``²`` and numbers past a
bigint in the job browser's ``q``, ``before``, ``priority`` and the job id
answered 500.
"""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.urls import reverse
from testapp.jobs import plain

from awa_django import InvalidJob, Unique, UniqueConflict, enqueue_many, ops
from awa_django.domain.payload import MAX_ORDERING_KEY_LENGTH, MAX_TAG_LENGTH, MAX_TAGS
from tests.django.conftest import console_user
from tests.factories import JobFactory
from tests.storage.test_enqueue import noop as keywords

pytestmark = pytest.mark.django_db

FIVE_MIB = 5 * 1024 * 1024
ODD_NUMBERS = ["²", "1e309", "-0", str(2**63), str(2**64), "9" * 40, "NaN", "-1", "0", "0x10"]


def job_rows() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM awa.jobs")
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"metadata": {"blob": "x" * FIVE_MIB}}, id="metadata-5MiB"),
        pytest.param({"tags": ["x" * FIVE_MIB]}, id="one-tag-5MiB"),
        pytest.param({"tags": ["x" * (MAX_TAG_LENGTH + 1)]}, id="tag-over-limit"),
        pytest.param({"tags": ["t"] * (MAX_TAGS + 1)}, id="too-many-tags"),
        pytest.param({"ordering_key": "k" * FIVE_MIB}, id="ordering-key-5MiB"),
        pytest.param({"ordering_key": b"k" * (MAX_ORDERING_KEY_LENGTH + 1)}, id="bytes-key"),
    ],
)
def test_metadata_tags_and_ordering_keys_are_bounded(queue, options):
    before = job_rows()
    with pytest.raises(InvalidJob):
        plain.using(queue=queue, **options).enqueue(1)
    with pytest.raises(InvalidJob):
        enqueue_many([plain.using(queue=queue, **options).prepare(1)])
    assert job_rows() == before


def test_metadata_is_measured_against_max_payload_bytes(queue, settings):
    settings.AWA = {**settings.AWA, "MAX_PAYLOAD_BYTES": 1000}
    fits = {"note": "é" * 400}  # 800 bytes of UTF-8 and the JSON around it
    ref = plain.using(queue=queue, metadata=fits).enqueue(1)
    assert ops.get_job(ref.id).metadata["note"] == fits["note"]
    with pytest.raises(InvalidJob, match=r"metadata is \d+ bytes as JSON, over the limit of 1000"):
        plain.using(queue=queue, metadata={"note": "é" * 500}).enqueue(1)


def test_limits_are_inclusive(queue):
    ref = plain.using(
        queue=queue,
        tags=["t" * MAX_TAG_LENGTH] * MAX_TAGS,
        ordering_key="k" * MAX_ORDERING_KEY_LENGTH,
    ).enqueue(1)
    assert ops.get_job(ref.id).tags == ["t" * MAX_TAG_LENGTH] * MAX_TAGS
    plain.using(queue=queue, ordering_key=b"k" * MAX_ORDERING_KEY_LENGTH).enqueue(2)


@pytest.mark.parametrize("value", ["\ud800", "a\udfffb", {"k": "\udc80"}])
def test_a_unique_job_with_a_lone_surrogate_is_invalid_job(queue, value):
    before = job_rows()
    unique = plain.using(queue=queue, unique=Unique(by_args=True))
    with pytest.raises(InvalidJob, match="lone surrogate"):
        unique.enqueue(value)  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="lone surrogate"):
        unique.prepare(value)  # type: ignore[arg-type]
    assert job_rows() == before
    # Without uniqueness the value is stored escaped, as before.
    ref = plain.using(queue=queue).enqueue(value)  # type: ignore[arg-type]
    assert ops.get_job(ref.id).args == [value]


def test_unique_jobs_with_valid_text_still_conflict(queue):
    unique = plain.using(queue=queue, unique=Unique(by_args=True))
    unique.enqueue("é")  # type: ignore[arg-type]
    with pytest.raises(UniqueConflict):
        unique.enqueue("e\u0301")  # type: ignore[arg-type]  # the same text, NFD


@pytest.mark.parametrize("period", [5e-324, 2.2250738585e-313, 1e-9, 0.0009])
def test_a_unique_period_too_short_for_a_window_number_is_invalid_job(period):
    # Found by the enqueue fuzz: now / 1e-313 is infinity, and the key's
    # window number raised OverflowError at enqueue.
    with pytest.raises(InvalidJob, match="by_period"):
        Unique(by_period=period)
    assert Unique(by_period=0.001).key("k", "q", "[]", "{}", now=1.8e9)


def test_a_keyword_argument_named_self_is_an_argument_like_any_other(queue):
    # Found by the enqueue fuzz: enqueue(self=...) raised TypeError ("multiple
    # values for argument 'self'") before the job's own signature was asked.
    ref = keywords.using(queue=queue).enqueue(self=1, args=2)
    assert ops.get_job(ref.id).kwargs == {"self": 1, "args": 2}
    assert json.loads(keywords.using(queue=queue).prepare(self=3).kwargs_json) == {"self": 3}


@pytest.fixture
def operator():
    return console_user(
        "operator", *(f"{verb}_{model}" for verb in ("view", "change") for model in MODELS)
    )


MODELS = ("job", "deadletter", "queue", "periodicschedule", "batchoperation")


@pytest.mark.parametrize("value", ODD_NUMBERS)
@pytest.mark.parametrize("field", ["q", "before", "priority"])
def test_odd_numbers_in_the_job_browser_are_not_500(operator, queue, field, value):
    job = JobFactory.create(queue=queue)
    response = operator.get(reverse("admin:awa_django_job_changelist"), {field: value})
    assert response.status_code == 200, response.content[:500]
    body = response.content.decode()
    if field != "q":
        assert f"#{job.id}" in body or f">{job.id}<" in body  # listed without the filter
    elif value.isascii() and value.isdigit():
        assert f"job id {value}" in body


@pytest.mark.parametrize("value", ODD_NUMBERS)
def test_odd_job_ids_in_urls_are_404_or_refused_not_500(operator, value):
    detail = f"/admin/awa_django/job/{value}/change/"
    assert operator.get(detail).status_code == 404
    for action in ("retry", "cancel", "dlq", "dlq_retry", "dlq_purge"):
        response = operator.post(f"/admin/awa_django/job/{value}/action/{action}/")
        assert response.status_code == 302, (action, response.status_code)
    response = operator.post(f"/admin/awa_django/batchoperation/{value}/action/cancel/")
    assert response.status_code == 302


@pytest.mark.parametrize("value", ODD_NUMBERS)
def test_odd_numbers_in_bulk_forms_are_not_500(operator, value):
    for url, form in [
        ("admin:awa_django_job_action", {"action": "cancel", "_selected_action": [value]}),
        (
            "admin:awa_django_deadletter_action",
            {"action": "dlq_purge", "_selected_action": [value]},
        ),
        (
            "admin:awa_django_deadletter_action",
            {"action": "dlq_retry_all", "to_priority": value, "confirm": "yes"},
        ),
        (
            "admin:awa_django_batchoperation_action",
            {"op_kind": "set_priority", "queue": "q", "state": ["available"], "priority": value},
        ),
    ]:
        response = operator.post(reverse(url), form)
        assert response.status_code in (200, 302), (url, form, response.status_code)
