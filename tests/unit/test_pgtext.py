"""The rule that makes handler text storable: NUL and lone surrogates escaped."""

from __future__ import annotations

import json

import pytest

from awa_django.domain.pgtext import clean_json, clean_text, clean_value, json_is_clean


def test_ordinary_text_is_returned_as_it_came():
    for text in ["", "plain ascii", "caf\u00e9 \u4e2d\u6587 \U0001f600", "a\\u0000b"]:
        assert clean_text(text) is text


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        ("a\x00b", "a\\x00b"),
        ("\x00\x00", "\\x00\\x00"),
        ("lone \ud800 high", "lone \\ud800 high"),
        ("lone \udfff low", "lone \\udfff low"),
        ("caf\u00e9\x00\udc80", "caf\u00e9\\x00\\udc80"),
    ],
)
def test_nul_and_lone_surrogates_are_escaped(text, stored):
    assert clean_text(text) == stored
    stored.encode("utf-8")  # now encodable


def test_values_are_cleaned_through_dicts_lists_and_keys():
    value = {"k\x00": ["a\ud800", ("t\x00",), 1, None, True, 2.5, {"n": "\x00"}]}
    assert clean_value(value) == {
        "k\\x00": ["a\\ud800", ["t\\x00"], 1, None, True, 2.5, {"n": "\\x00"}]
    }


@pytest.mark.parametrize(
    "value",
    [["a\x00"], {"\ud800": 1}, ["\ud83d\ude00: two lone halves"], "x\\u0000 kept as text"],
)
def test_clean_json_gives_text_jsonb_accepts(value):
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        cleaned = clean_json(text)
        cleaned.encode("utf-8")
        stored = json.loads(cleaned)
        assert stored == clean_value(json.loads(text)) and clean_value(stored) == stored


def test_clean_json_keeps_clean_text():
    text = json.dumps({"a": "caf\u00e9", "b": [1, 2]}, ensure_ascii=False)
    assert json_is_clean(text) and clean_json(text) is text
