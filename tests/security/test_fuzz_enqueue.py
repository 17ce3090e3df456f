"""Every text input of enqueue under NUL, lone surrogates, huge values and odd numbers.

Args, kwargs, metadata, tags, ordering keys, unique keys, queue names,
concurrency keys and ``run_at``, through ``enqueue``, ``enqueue_many``
(COPY) and Django's Tasks API: each call is written whole and reads back,
or raises ``InvalidJob`` (``InvalidTask`` for a task's own options) with
nothing written.  After every call the job browser still works, so nothing
unreadable was committed.  ``tests/storage/test_fuzz_enqueue.py`` fuzzes
argument shapes; this module aims at the values.
"""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testapp import tasks
from testapp.jobs import plain

import awa_django
from awa_django import InvalidJob, Unique, UniqueConflict, ops
from tests.storage.test_validation import row_counts

from .odd_values import ODD_NUMBERS, ODD_VALUES, any_text, odd

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
HUGE = "x" * (5 * 1024 * 1024)
NUMBERS = [float("nan"), float("inf"), -0.0, 2**63, -(2**63) - 1, 10**400, 1e308]
EDGE_TIMES = [
    dt.datetime.max.replace(tzinfo=dt.timezone(dt.timedelta(hours=-12))),
    dt.datetime.max.replace(tzinfo=dt.UTC),
    dt.datetime.min.replace(tzinfo=dt.timezone(dt.timedelta(hours=14))),
    dt.datetime.min.replace(tzinfo=dt.UTC),
    dt.datetime(2000, 1, 1, tzinfo=dt.UTC),
]


def outcome(call) -> Exception | None:
    """Run ``call`` in a savepoint: None if it wrote, the InvalidJob if refused.

    Any other exception (a database error, UnicodeEncodeError, OverflowError)
    fails the test.
    """
    before = row_counts()
    try:
        with transaction.atomic():
            call()
    except (InvalidJob, UniqueConflict) as exc:
        assert str(exc)
        assert row_counts() == before, "refused, but something was written"
        return exc
    ops.browse_jobs(limit=20)  # every committed row reads back
    return None


def options_with(value) -> list[dict]:
    """Every option that takes text or a number, set to ``value``."""
    return [
        {"queue": value},
        {"tags": [value]},
        {"tags": value},
        {"metadata": {"k": value}},
        {"metadata": {value: 1}} if isinstance(value, str) else {"metadata": value},
        {"ordering_key": value},
        {"concurrency_key": value},
        {"priority": value},
        {"max_attempts": value},
        {"run_in": value},
        {"run_at": value},
    ]


def enqueue_everywhere(queue: str, value, options: dict) -> None:
    """One value through enqueue, enqueue_many and a unique job."""
    opts = {"queue": queue, **options}
    for call in (
        lambda: plain.using(**opts).enqueue(value),
        lambda: plain.using(**opts).enqueue(1, b=value),
        lambda: awa_django.enqueue_many([plain.using(**opts).prepare(value) for _ in range(3)]),
        lambda: plain.using(**opts, unique=Unique(by_args=True)).enqueue(value),
    ):
        outcome(call)


@pytest.mark.parametrize("value", [*ODD_VALUES, *NUMBERS, *EDGE_TIMES, HUGE], ids=repr)
def test_odd_values_in_every_enqueue_input_are_written_or_refused(queue, value):
    enqueue_everywhere(queue, value, {})
    for options in options_with(value):
        outcome(lambda options=options: plain.using(**{"queue": queue, **options}).enqueue(1))


@pytest.mark.parametrize("field", ["metadata", "tags", "ordering_key"])
def test_huge_values_outside_the_arguments_are_refused(queue, field):
    value = {"metadata": {"blob": HUGE}, "tags": [HUGE], "ordering_key": HUGE}[field]
    assert isinstance(
        outcome(lambda: plain.using(queue=queue, **{field: value}).enqueue(1)), InvalidJob
    )


def test_accepted_odd_text_reads_back_exactly(queue):
    for value in ODD_VALUES:
        if outcome(lambda v=value: plain.using(queue=queue).enqueue(v)) is None:
            stored = ops.browse_jobs(queue=queue, limit=1).jobs[0].args
            assert stored == [value]


@pytest.mark.parametrize("number", ODD_NUMBERS)
def test_odd_numbers_as_text_never_become_numbers(queue, number):
    for key in ("priority", "max_attempts", "run_in", "run_at"):
        assert isinstance(
            outcome(lambda k=key: plain.using(queue=queue, **{k: number}).enqueue(1)), InvalidJob
        )


@pytest.mark.parametrize("value", ["\ud800", "a\x00b", HUGE, "²", "1e309"])
def test_the_tasks_api_takes_or_refuses_odd_arguments(value):
    before = row_counts()
    try:
        with transaction.atomic():
            result = tasks.add.enqueue(value, 1)
    except (InvalidJob, TypeError) as exc:
        assert str(exc) and row_counts() == before
        return
    assert ops.get_job(int(result.id)).args[0] == value


@FUZZ
@given(value=st.one_of(odd, st.floats(), st.integers(min_value=-(2**80), max_value=2**80)))
def test_arbitrary_values_through_every_enqueue_path(queue, value):
    enqueue_everywhere(queue, value, {})
    if isinstance(value, float) and not math.isfinite(value):
        return
    for options in options_with(value):
        outcome(lambda options=options: plain.using(**{"queue": queue, **options}).enqueue(1))


@FUZZ
@given(key=any_text, by_period=st.one_of(st.floats(), st.integers(), st.timedeltas()))
def test_arbitrary_unique_keys_and_periods(queue, key, by_period):
    def unique_job():
        unique = Unique(by_args=True, by_period=by_period)  # InvalidJob for a bad period
        plain.using(queue=queue, unique=unique).enqueue(1, b=key)  # type: ignore[arg-type]

    outcome(unique_job)
