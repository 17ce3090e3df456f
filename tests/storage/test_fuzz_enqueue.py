"""Fuzzed enqueue calls: each one is written whole, or refused with
``InvalidJob`` and nothing written.  No other exception, ever.

Hypothesis draws arguments from JSON-like values mixed with what JSON
cannot hold (NaN, infinities, lone surrogates, NUL, bytes, sets, objects,
non-string keys), huge and deeply nested payloads, and wrong types for
every option of ``using()``.  A job that is accepted must read back equal
to what was given.
"""

from __future__ import annotations

import datetime as dt
import json
import math

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import awa_django
from awa_django import InvalidJob, ops
from tests.conftest import examples

from .test_enqueue import noop
from .test_validation import row_counts

pytestmark = pytest.mark.django_db

FUZZ = settings(
    max_examples=examples(120),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Every code point, lone surrogates and NUL included.
any_text = st.text(st.characters(codec=None, min_codepoint=0), max_size=12)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    any_text,
)
json_like = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=16,
)
not_json = st.one_of(
    st.binary(max_size=8),
    st.sets(st.integers(), max_size=3),
    st.builds(object),
    st.complex_numbers(allow_nan=False),
    st.datetimes(),
    st.decimals(allow_nan=False),
    st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2),
)
argument = st.one_of(json_like, not_json)


def deep(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def stored_equal(given_value, stored) -> bool:
    """Whether the stored JSON equals what the caller passed (tuples are lists)."""
    return json.loads(json.dumps(given_value)) == stored


def attempt(call) -> tuple[object | None, InvalidJob | None]:
    """Run ``call`` in a savepoint; a database error is a bug, not a refusal."""
    try:
        with transaction.atomic():
            return call(), None
    except InvalidJob as exc:
        assert str(exc), "InvalidJob without a message"
        return None, exc


@FUZZ
@given(args=st.lists(argument, max_size=3), kwargs=st.dictionaries(any_text, argument, max_size=3))
def test_fuzzed_arguments_are_written_whole_or_refused_cleanly(queue, args, kwargs):
    before = row_counts()
    ref, error = attempt(lambda: noop.using(queue=queue).enqueue(*args, **kwargs))
    if error is not None:
        assert row_counts() == before
        return
    info = ops.get_job(ref.id)
    assert stored_equal(args, info.args) and stored_equal(kwargs, info.kwargs)
    for value in [*args, *kwargs.values()]:
        # What JSON cannot represent never gets in.
        assert not (isinstance(value, float) and not math.isfinite(value))


options = st.fixed_dictionaries(
    {},
    optional={
        "queue": st.one_of(any_text, st.integers(), st.none()),
        "priority": st.one_of(st.integers(-3, 8), st.booleans(), any_text, st.floats()),
        "max_attempts": st.one_of(st.integers(-2, 1001), any_text, st.floats()),
        "tags": st.one_of(st.lists(st.one_of(any_text, st.integers()), max_size=3), any_text),
        "metadata": st.one_of(st.dictionaries(any_text, json_like, max_size=3), json_like),
        "ordering_key": st.one_of(any_text, st.integers(), st.none()),
        "run_in": st.one_of(
            st.floats(allow_nan=True), st.integers(-5, 10**12), st.timedeltas(), any_text
        ),
        "run_at": st.one_of(st.datetimes(), st.datetimes(timezones=st.just(dt.UTC)), any_text),
    },
)


@FUZZ
@given(opts=options)
def test_fuzzed_options_are_accepted_or_refused_with_invalid_job(queue, opts):
    opts.setdefault("queue", queue)
    before = row_counts()
    if "run_in" in opts and "run_at" in opts:
        del opts["run_at"]
    ref, error = attempt(lambda: noop.using(**opts).enqueue(1))
    if error is not None:
        assert row_counts() == before
        return
    info = ops.get_job(ref.id)
    assert info.queue == opts["queue"]
    if "priority" in opts:
        assert info.priority == opts["priority"]


@FUZZ
@given(batch=st.lists(st.tuples(argument, st.integers(-1, 6)), min_size=1, max_size=6))
def test_a_fuzzed_batch_is_written_whole_or_not_at_all(queue, batch):
    before = row_counts()

    def write():
        prepared = [noop.using(queue=queue, priority=p).prepare(value) for value, p in batch]
        return awa_django.enqueue_many(prepared)

    ids, error = attempt(write)
    if error is not None:
        assert row_counts() == before
        return
    assert len(ids) == len(batch)
    for job_id, (value, _) in zip(ids, batch, strict=True):
        assert stored_equal([value], ops.get_job(job_id).args)


@pytest.mark.parametrize(
    "payload",
    [deep(5_000), deep(200_000), "x" * 2_000_000, ["\ud800" * 10], {"\x00": 1}, ["a\x00b"]],
    ids=["deep", "very deep", "huge", "lone surrogates", "NUL key", "NUL value"],
)
def test_hostile_payloads_are_refused_or_stored_exactly(queue, payload):
    before = row_counts()
    ref, error = attempt(lambda: noop.using(queue=queue).enqueue(payload))
    if error is None:
        assert stored_equal([payload], ops.get_job(ref.id).args)
    else:
        assert row_counts() == before
