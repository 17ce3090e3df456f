"""The console under odd query strings, path ids and form fields: every answer is
a page (200), a redirect with a message (302) or a 404, never a 500.

Values come from :mod:`.odd_values` and Hypothesis; they travel as
percent-encoded UTF-8 (a lone surrogate as the bytes Python would write
for it, which the server decodes as replacement characters), so the
request is exactly what a browser or a script could send.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings

from tests.django.conftest import console_user
from tests.factories import JobFactory

from .odd_values import ODD_VALUES, odd

pytestmark = pytest.mark.django_db

MODELS = ("job", "deadletter", "queue", "periodicschedule", "batchoperation")
JOB_FILTERS = ("q", "before", "priority", "state", "queue", "kind", "tag")
DLQ_FILTERS = ("queue", "kind")
FUZZ = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def encoded(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


@pytest.fixture
def operator() -> Client:
    perms = [f"{verb}_{model}" for verb in ("view", "change") for model in MODELS]
    return console_user("fuzz-operator", *perms)


def get_ok(client: Client, url: str) -> int:
    status = client.get(url).status_code
    assert status in (200, 400, 404), (url, status)
    return status


def lists(operator: Client, value: str) -> None:
    """Both lists with ``value`` in every filter at once (each parser sees it)."""
    for url, fields in (
        (reverse("admin:awa_django_job_changelist"), JOB_FILTERS),
        (reverse("admin:awa_django_deadletter_changelist"), DLQ_FILTERS),
    ):
        query = "&".join(f"{field}={encoded(value)}" for field in fields)
        assert get_ok(operator, f"{url}?{query}") == 200


def paths(operator: Client, value: str) -> None:
    key = encoded(value) or "%20"
    get_ok(operator, f"/admin/awa_django/job/{key}/change/")
    get_ok(operator, f"/admin/awa_django/queue/{key}/change/")
    for model, actions in (
        ("job", ("retry", "cancel", "dlq", "dlq_retry", "dlq_purge")),
        ("queue", ("pause", "resume", "drain")),
        ("periodicschedule", ("pause", "resume", "run")),
        ("batchoperation", ("cancel",)),
    ):
        for action in actions:
            url = f"/admin/awa_django/{model}/{key}/action/{action}/"
            for form in ({}, {"confirm": "yes"}):
                status = operator.post(url, form).status_code
                assert status in (200, 302, 400, 404), (url, form, status)


def forms(operator: Client, value: str) -> None:
    for name, form in [
        ("job", {"action": "cancel", "_selected_action": [value]}),
        ("job", {"action": value, "_selected_action": ["1"], "confirm": "yes"}),
        ("deadletter", {"action": "dlq_purge_all", "queue": value}),
        ("deadletter", {"action": "dlq_retry_all", "kind": value, "confirm": "yes"}),
        ("deadletter", {"action": "dlq_retry_all", "to_queue": value, "confirm": "yes"}),
        ("deadletter", {"action": "dlq_retry_all", "to_priority": value, "confirm": "yes"}),
        ("batchoperation", {"op_kind": value, "queue": "q", "state": ["available"]}),
        ("batchoperation", {"op_kind": "set_priority", "queue": value, "priority": "1"}),
        ("batchoperation", {"op_kind": "set_priority", "queue": "q", "priority": value}),
        ("batchoperation", {"op_kind": "set_priority", "queue": "q", "kind": value}),
        ("batchoperation", {"op_kind": "set_priority", "queue": "q", "tag": value}),
        ("batchoperation", {"op_kind": "move_queue", "queue": "q", "to_queue": value}),
        ("batchoperation", {"op_kind": "set_priority", "queue": "q", "state": [value]}),
    ]:
        body = "&".join(
            f"{encoded(k)}={encoded(v)}"
            for k, values in form.items()
            for v in (values if isinstance(values, list) else [values])
        )
        url = reverse(f"admin:awa_django_{name}_action")
        for extra in ("", "&confirm=yes"):
            response = operator.post(
                url, body + extra, content_type="application/x-www-form-urlencoded"
            )
            assert response.status_code in (200, 302), (name, form, response.status_code)


def test_odd_values_in_every_list_filter_answer_a_page(operator, queue):
    JobFactory.create(queue=queue)
    for value in ODD_VALUES:
        lists(operator, value)
        get_ok(operator, f"/admin/awa_django/queue/{encoded(value) or '%20'}/change/")


def test_odd_values_in_every_path_id_are_404_or_a_refusal(operator, queue):
    job = JobFactory.create(queue=queue)
    for value in ODD_VALUES:
        paths(operator, value)
    assert get_ok(operator, f"/admin/awa_django/job/{job.id}/change/") == 200


def test_odd_values_in_every_form_field_are_refused_with_a_message(operator, queue):
    job = JobFactory.create(queue=queue)
    for value in ODD_VALUES:
        forms(operator, value)
    assert get_ok(operator, f"/admin/awa_django/job/{job.id}/change/") == 200


@FUZZ
@given(value=odd)
def test_arbitrary_query_strings_never_answer_500(operator, value):
    lists(operator, value)


@FUZZ
@given(value=odd)
def test_arbitrary_path_ids_and_form_fields_never_answer_500(operator, value):
    paths(operator, value)
    forms(operator, value)
