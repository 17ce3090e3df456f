"""The chaos report: one table of scenario rows, as markdown and JSON.

Written by the bounded run (tests/reliability/test_chaos.py, into
tests/artifacts/) and by soak mode (tests/reliability/soak.py, into
bench/results/).  Imports nothing of Django, so the soak driver can use it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

COLUMNS = [
    ("scenario", "scenario"),
    ("offered", "jobs offered"),
    ("completed", "completed"),
    ("lost", "lost"),
    ("duplicated", "duplicated"),
    ("reexecuted", "re-executed"),
    ("recovery_s", "recovery s"),
    ("max_dead_tuples", "max dead tuples"),
    ("max_size_bytes", "max size"),
]


def _size(value: int) -> str:
    if value <= 0:
        return "0"
    units = ["B", "KiB", "MiB", "GiB"]
    power = min(int(math.log(value, 1024)), len(units) - 1)
    return f"{value / 1024**power:.1f} {units[power]}"


def markdown_table(rows: list[dict[str, Any]]) -> str:
    header = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in COLUMNS) + "|"
    lines = [header, rule]
    for row in rows:
        cells = []
        for key, _ in COLUMNS:
            value = row.get(key)
            if key == "max_size_bytes":
                cells.append(_size(int(value or 0)))
            elif value is None:
                cells.append("-")
            else:
                cells.append(str(value))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(rows: list[dict[str, Any]], stem: Path, meta: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``stem``.md and ``stem``.json; returns both paths."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    md, js = stem.with_suffix(".md"), stem.with_suffix(".json")
    js.write_text(json.dumps({"meta": meta, "scenarios": rows}, indent=2, default=str) + "\n")
    lines = [f"# Chaos report: {meta.get('title', stem.name)}", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items() if key != "title"]
    lines += ["", markdown_table(rows), ""]
    notes = [(row["scenario"], row.get("notes") or {}) for row in rows]
    if any(n for _, n in notes):
        lines += ["## Notes", ""]
        lines += [f"- {name}: {json.dumps(n, default=str)}" for name, n in notes if n]
        lines.append("")
    md.write_text("\n".join(lines))
    return md, js
