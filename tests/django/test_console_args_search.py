"""The job browser's search by arguments (``?args=<json>``)."""

from __future__ import annotations

import json
import re
from urllib.parse import urlencode

import pytest
from django.urls import reverse

from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def jobs_url(**params: str) -> str:
    return reverse("admin:awa_django_job_changelist") + "?" + urlencode(params)


def listed(html: str) -> list[int]:
    """Ids of the jobs in the page's result table, in order."""
    return [int(n) for n in re.findall(r'name="_selected_action" value="(\d+)"', html)]


def test_the_page_lists_the_jobs_whose_arguments_match(superuser, queue):
    mine = [
        JobFactory.create(queue=queue, args_json="[42]", kwargs_json='{"customer_id": 42}')
        for _ in range(3)
    ]
    other = JobFactory.create(queue=queue, args_json="[7]", kwargs_json='{"customer_id": 7}')
    wanted = sorted((j.id for j in mine), reverse=True)
    html = superuser.get(jobs_url(queue=queue, args='{"customer_id": 42}')).content.decode()
    assert listed(html) == wanted
    assert other.id not in listed(html)
    assert "arguments containing" in html
    # The field keeps what was typed; a list searches positional args.
    assert 'value="{&quot;customer_id&quot;: 42}"' in html
    assert listed(superuser.get(jobs_url(queue=queue, args="[7]")).content.decode()) == [other.id]


def test_paging_keeps_the_arguments_filter(superuser, queue, django_assert_max_num_queries):
    for n in range(55):
        JobFactory.create(queue=queue, kwargs_json=json.dumps({"customer_id": 42, "n": n}))
    # The same bound as the unfiltered browser (test_console_admin).
    with django_assert_max_num_queries(12):
        response = superuser.get(jobs_url(queue=queue, args='{"customer_id": 42}'))
    html = response.content.decode()
    assert len(listed(html)) == 50
    older = re.search(r'href="(\?[^"]*before=\d+[^"]*)" class="awa-older"', html)
    assert older is not None and "args=" in older.group(1)
    query = older.group(1).replace("&amp;", "&")
    rest = superuser.get(reverse("admin:awa_django_job_changelist") + query)
    assert len(listed(rest.content.decode())) == 5


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("{customer_id: 42}", "not valid JSON"),
        ("42", "must be a JSON object (matches kwargs) or a JSON array (matches args)"),
        ("{}", "empty"),
        ("[" + "1," * 600 + "1]", "too long"),
    ],
)
def test_a_malformed_filter_is_a_form_error_not_a_500(superuser, queue, typed, says):
    JobFactory.create(queue=queue, kwargs_json='{"customer_id": 42}')
    response = superuser.get(jobs_url(queue=queue, args=typed))
    assert response.status_code == 200
    html = response.content.decode()
    errors = re.search(r'<ul class="errorlist" id="args-error"><li>(.*?)</li>', html, re.S)
    assert errors is not None and says in errors.group(1)
    assert 'aria-invalid="true"' in html
    assert listed(html) == []  # no unfiltered page passed off as matches
    assert "No search ran: correct the arguments filter." in html
