"""Search by arguments (``args_contains``): jsonb containment on kwargs (an
object) or args (a list), in every plane a job can be in, bounded by the id
windows of the job browser, refused before any query when malformed."""

from __future__ import annotations

import json
import re

import pytest

from awa_django import ops
from awa_django.exceptions import InvalidJob
from awa_django.ops.arguments import MAX_FILTER_LENGTH
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

#: Every state the factory makes, plus the DLQ (a failed job moved there);
#: the available ones last (the factory claims the job it walks to a state
#: from its queue, which must hold no other available job).
STATES = ("running", "completed", "failed", "cancelled", "retryable", "scheduled", "available")


def make(queue: str, state: str, args: list, kwargs: dict):
    return JobFactory.create(
        queue=queue, state=state, args_json=json.dumps(args), kwargs_json=json.dumps(kwargs)
    )


@pytest.fixture
def customers(queue):
    """For each state and the DLQ, a job of customer 42 and one of customer 7;
    returns {state: (job of 42, job of 7)} with each job's current state."""
    made = {}
    for n, state in enumerate(("dlq", *STATES)):
        made_as = "failed" if state == "dlq" else state
        mine = make(queue, made_as, [42, f"n{n}"], {"customer_id": 42})
        other = make(queue, made_as, [7, f"n{n}"], {"customer_id": 7})
        if state == "dlq":
            assert ops.move_failed_to_dlq(mine.id) and ops.move_failed_to_dlq(other.id)
        made[state] = (mine.id, other.id)
    return made


def test_an_object_matches_kwargs_in_every_state(customers, queue):
    wanted = sorted(mine for mine, _ in customers.values())
    found = ops.list_jobs(queue=queue, args_contains={"customer_id": 42})
    assert [j.id for j in found] == wanted  # oldest first, like every list_jobs
    assert {j.state for j in found} == {*STATES, "dlq"}
    page = ops.browse_jobs(queue=queue, args_contains={"customer_id": 42})
    assert [j.id for j in page.jobs] == wanted[::-1]
    # JSON text (what the console passes) is the same filter.
    assert ops.browse_jobs(queue=queue, args_contains='{"customer_id": 42}').jobs == page.jobs


def test_a_list_matches_positional_args_in_any_position(customers, queue):
    wanted = sorted(mine for mine, _ in customers.values())
    assert [j.id for j in ops.list_jobs(queue=queue, args_contains=[42])] == wanted
    # Every listed element must be there, in any order.
    assert [j.id for j in ops.list_jobs(queue=queue, args_contains=["n3", 42])] == [wanted[3]]
    assert ops.list_jobs(queue=queue, args_contains=[42, 7]) == []


def test_the_other_filters_still_apply(customers, queue):
    done = ops.browse_jobs(queue=queue, state="completed", args_contains={"customer_id": 7})
    assert [j.id for j in done.jobs] == [customers["completed"][1]]
    assert ops.list_jobs(queue=f"{queue}-other", args_contains={"customer_id": 42}) == []


def test_an_object_never_matches_args_nor_a_list_kwargs(queue):
    positional = make(queue, "available", [{"customer_id": 42}], {})
    keyword = make(queue, "available", [], {"ids": [42, 43], "order": {"id": 5, "lines": [1, 2]}})
    assert [j.id for j in ops.list_jobs(queue=queue, args_contains={"customer_id": 42})] == []
    assert [j.id for j in ops.list_jobs(queue=queue, args_contains=[{"customer_id": 42}])] == [
        positional.id
    ]
    assert ops.list_jobs(queue=queue, args_contains=[42]) == []
    # Containment reaches into nested values: a sub-object, an element of a list.
    for nested in ({"order": {"lines": [2]}}, {"ids": [43]}, {"order": {"id": 5}}):
        assert [j.id for j in ops.list_jobs(queue=queue, args_contains=nested)] == [keyword.id]
    assert ops.list_jobs(queue=queue, args_contains={"order": {"id": 6}}) == []


def test_a_key_no_job_has_finds_nothing_in_a_bounded_number_of_queries(
    customers, queue, django_assert_num_queries
):
    # The newest job id, then one call of awa.job_page_matching, however
    # many windows it walks: the same two statements as any browser page.
    with django_assert_num_queries(2):
        page = ops.browse_jobs(args_contains={"no_such_key": 1})
    assert page.jobs == []
    assert page.searched_from - page.searched_to <= ops.jobs.BROWSE_SCAN
    with django_assert_num_queries(2):
        assert ops.list_jobs(args_contains={"no_such_key": 1}) == []


def test_the_search_reads_only_its_id_range_and_continues_below_it(queue):
    old = [make(queue, "completed", [n], {"customer_id": 42}) for n in range(3)]
    for n in range(20):
        make(queue, "completed", [n], {"customer_id": 7})
    page = ops.browse_jobs(args_contains={"customer_id": 42}, queue=queue, scan=8, limit=10)
    assert page.jobs == [] and page.searched_from - page.searched_to == 8
    found: list[int] = []
    while page.older is not None:
        page = ops.browse_jobs(
            args_contains={"customer_id": 42}, queue=queue, scan=8, limit=10, before=page.older
        )
        found += [j.id for j in page.jobs]
    assert found == sorted((j.id for j in old), reverse=True)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("{not json", "not valid JSON"),
        ("42", "JSON object (matches kwargs) or a JSON array"),
        ('"customer_id"', "JSON object (matches kwargs) or a JSON array"),
        ("null", "JSON object (matches kwargs) or a JSON array"),
        (42, "JSON object (matches kwargs) or a JSON array"),
        ("{}", "empty"),
        ([], "empty"),
        ("[NaN]", "NaN is not a JSON value"),
        ([float("inf")], "not JSON"),
        ({"k": "nul\x00"}, "NUL"),
        ('{"k": "nul\\u0000"}', "NUL"),
        ({"k": "\ud800"}, "lone surrogate"),
        ({"k": "x" * MAX_FILTER_LENGTH}, "too long"),
        ("[" + "1," * MAX_FILTER_LENGTH + "1]", "too long"),
    ],
)
def test_a_malformed_filter_is_refused_before_any_query(value, says, django_assert_num_queries):
    with django_assert_num_queries(0):
        for search in (ops.list_jobs, ops.browse_jobs):
            with pytest.raises(InvalidJob, match=re.escape(says)):
                search(args_contains=value)
