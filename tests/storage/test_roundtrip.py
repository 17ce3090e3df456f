"""Property: any JSON-serialisable arguments come back unchanged."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import awa_django
from awa_django import ops
from tests.conftest import examples

from .test_enqueue import noop

finite_floats = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | st.integers() | finite_floats | st.text()
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(), children, max_size=5)
    ),
    max_leaves=30,
)


def same(a, b) -> bool:
    """Equality that also tells 0.0 from -0.0 and 1 from 1.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    args=st.lists(json_values, max_size=4),
    kwargs=st.dictionaries(st.text(), json_values, max_size=4),
)
def test_arguments_round_trip_through_enqueue_and_get_job(db, args, kwargs):
    single = noop.using(queue="roundtrip").enqueue(*args, **kwargs)
    [batched] = awa_django.enqueue_many([noop.using(queue="roundtrip").prepare(*args, **kwargs)])
    for job_id in (single.id, batched):
        info = ops.get_job(job_id)
        assert same(info.args, list(args)), (info.args, args)
        assert same(info.kwargs, kwargs), (info.kwargs, kwargs)
