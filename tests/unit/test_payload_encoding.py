"""The one-shot JSON encoder of ``awa_django.domain.payload``.

``prepare`` encodes every job's arguments with an encoder built once
(``payload._encode``) instead of ``JSONEncoder.encode``, which sets a new
one up per call.  These tests hold the two to the same text and the same
errors, and check that a circular structure -- which the one-shot encoder
no longer detects itself -- is still refused before it is encoded.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awa_django import InvalidJob
from awa_django.domain import payload
from tests.conftest import examples

REFERENCE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def test_the_fast_encoder_is_in_use():
    # CPython ships the C accelerator: if this fails, prepare silently lost
    # its fast path (payload._one_shot_encoder fell back).
    assert payload._encode != payload._ENCODER.encode


@settings(max_examples=examples(300), deadline=None)
@given(json_values)
def test_the_fast_encoder_writes_what_json_encoder_writes(value):
    assert payload._encode(value) == REFERENCE.encode(value)


@pytest.mark.parametrize("value", [float("nan"), float("-inf"), {1, 2}, object(), b"bytes"])
def test_unencodable_values_fail_with_the_reference_message(value):
    with pytest.raises((TypeError, ValueError)) as expected:
        REFERENCE.encode([value])
    with pytest.raises(InvalidJob) as raised:
        payload.to_json([value], "args")
    assert str(raised.value) == f"args is not JSON-serialisable: {expected.value}"


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_a_circular_structure_is_refused_before_encoding(kind):
    loop: list | dict = [] if kind == "list" else {}
    if isinstance(loop, list):
        loop.append(loop)
    else:
        loop["self"] = loop
    with pytest.raises(InvalidJob, match="nests lists and dicts deeper"):
        payload.to_json([loop], "args")


def test_arguments_are_encoded_from_the_call_tuple():
    assert payload.encode_arguments((1, "é", [2]), {"k": (3,)}, 100) == ('[1,"é",[2]]', '{"k":[3]}')
