"""Text PostgreSQL will store: what a handler produces, made storable.

PostgreSQL refuses two things Python strings can hold: ``text`` and
``jsonb`` cannot contain NUL (U+0000, sent as ``\\u0000`` in JSON), and
UTF-8 cannot encode a lone surrogate (U+D800 to U+DFFF; ``jsonb`` refuses
the ``\\ud800`` escape too).  An error message, a traceback, a progress
message or a callback's error holding one would make the closure of its
attempt unwritable, so whatever goes into a ``jsonb`` value or a ``text``
column from a handler or a callback sender passes through here first.

The rule (documented in ``docs/howto/retries.md``, "Characters PostgreSQL
cannot store"): each NUL becomes the four characters ``\\x00`` and each
lone surrogate the six characters of its escape (``\\ud800``), the way
Python's ``repr`` and ``backslashreplace`` spell them; dict keys are
cleaned like values.  Everything else is kept as it is.

Cost: ordinary text is returned as it came, after one scan in C
(``str.isascii`` and ``in`` for ASCII, one regex search otherwise); only
text that holds an offending character is rebuilt.

Pure: no database, ORM or event loop here, so the rule is unit-tested on
its own.
"""

from __future__ import annotations

import json
import re
from typing import Any

_UNSAFE = re.compile("[\x00\ud800-\udfff]")
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return "\\x00" if char == "\x00" else f"\\u{ord(char):04x}"


def clean_text(text: str) -> str:
    """``text`` with NUL and lone surrogates escaped (itself when it has none)."""
    if text.isascii():
        if "\x00" not in text:
            return text
    elif _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)


def clean_value(value: Any) -> Any:
    """``value`` (JSON data: dicts, lists, strings, numbers...) with every
    string and dict key cleaned by :func:`clean_text`."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_value(item) for item in value]
    return value


def json_is_clean(text: str) -> bool:
    """Whether ``jsonb`` accepts this JSON text as it is.

    Conservative: an escaped backslash before ``u0000`` or a valid surrogate
    pair escape also answer False (:func:`clean_json` then rebuilds text that
    was fine, at no harm).
    """
    if "\\u0000" in text or "\\ud" in text or "\\uD" in text:
        return False
    return text.isascii() or _UNSAFE.search(text) is None


def clean_json(text: str) -> str:
    """JSON text ``jsonb`` accepts: ``text`` itself, or its value cleaned and
    encoded again."""
    if json_is_clean(text):
        return text
    return _ENCODER.encode(clean_value(json.loads(text)))
