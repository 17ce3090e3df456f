"""The awkward values every text input of the project is fuzzed with.

NUL, lone surrogates, numbers that are not what they look like (``²`` is a
digit to ``str.isdigit``, ``1e309`` overflows a float, ``-0``, one past a
signed 64-bit integer, ``NaN``) and text too long for anything.
"""

from __future__ import annotations

from hypothesis import strategies as st

ODD_NUMBERS = [
    "²",
    "1e309",
    "-0",
    str(2**63),
    str(-(2**63) - 1),
    str(2**64),
    "NaN",
    "-1",
    "0",
    "0x10",
    "١٢",
    " 7 ",
]
ODD_TEXT = ["\x00", "a\x00b", "\ud800", "x\udfffy", "", " ", "x" * 100_000, "é" * 300]
ODD_VALUES = ODD_NUMBERS + ODD_TEXT

#: Any text: every code point, NUL and lone surrogates included.
any_text = st.text(st.characters(codec=None, min_codepoint=0), max_size=24)
odd = st.one_of(st.sampled_from(ODD_VALUES), any_text)
