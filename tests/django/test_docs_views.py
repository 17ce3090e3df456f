"""The read-view reference (docs/reference/views.md) matches the installed views."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "views.md"
SECTION = re.compile(r"^## `awa\.(\w+)`$", re.MULTILINE)
ROW = re.compile(r"^\| `(\w+)` \| ([\w\[\] ]+) \|", re.MULTILINE)
SHORT = {"timestamp with time zone": "timestamptz"}


def documented() -> dict[str, list[tuple[str, str]]]:
    text = PAGE.read_text()
    heads = list(SECTION.finditer(text))
    views = {}
    for index, head in enumerate(heads):
        end = heads[index + 1].start() if index + 1 < len(heads) else len(text)
        views[head[1]] = [(m[1], m[2].strip()) for m in ROW.finditer(text, head.end(), end)]
    return views


@pytest.mark.django_db
def test_every_view_and_column_is_documented_in_order():
    pages = documented()
    with connection.cursor() as cursor:
        cursor.execute("SELECT viewname FROM pg_views WHERE schemaname = 'awa' ORDER BY 1")
        installed = [name for (name,) in cursor.fetchall()]
        assert sorted(pages) == installed
        for view, columns in pages.items():
            cursor.execute(
                """
                SELECT a.attname, format_type(a.atttypid, a.atttypmod)
                  FROM pg_attribute a
                 WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
                 ORDER BY a.attnum
                """,
                [f"awa.{view}"],
            )
            actual = [(name, SHORT.get(kind, kind)) for name, kind in cursor.fetchall()]
            assert columns == actual, view
