"""``JobOptions``: one frozen record of a call's options, and the metadata it stores."""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import json
from pathlib import Path

import pytest

import awa_django
from awa_django import InvalidJob, Unique
from awa_django.domain.concurrency import CONCURRENCY_KEY, CONCURRENCY_LIMIT
from awa_django.domain.dependencies import DEPENDS_ON, ON_FAILURE
from awa_django.domain.options import CallOptions, JobOptions, StoredOptions
from awa_django.domain.payload import TRACEPARENT_KEY

PACKAGE = Path(awa_django.__file__).parent


def base(**given) -> JobOptions:
    return JobOptions(queue="default", priority=2, max_attempts=25, **given)


def test_every_option_using_accepts_is_a_field_and_back():
    settable = {f.name for f in dataclasses.fields(JobOptions) if f.init}
    assert set(CallOptions.__optional_keys__) == settable


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"queue": "mail", "priority": 1},
        {"run_in": dt.timedelta(minutes=1)},
        {"run_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC)},
        {"ordering_key": b"k", "tags": ["x", "y"], "metadata": {"b": [1]}},
        {"concurrency_key": "c", "concurrency_limit": 3, "database": "other"},
        {"depends_on": [5, 5, 6], "on_dependency_failure": "run"},
        {"unique": Unique(by_args=False), "max_attempts": 1},
    ],
)
def test_using_is_replace(changes):
    options = base(ordering_key="o", tags=["t"], metadata={"a": 1})
    copy, replaced = options.using(**changes), dataclasses.replace(options, **changes)
    assert copy == replaced
    assert (copy.stored_ordering_key, copy.metadata_json) == (
        replaced.stored_ordering_key,
        replaced.metadata_json,
    )


def test_using_validates_the_copy():
    options = base(tags=["a"])
    changed = options.using(queue="mail", run_in=dt.timedelta(seconds=5))
    assert (changed.queue, changed.run_in, changed.tags) == ("mail", 5.0, ("a",))
    assert options.queue == "default"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.queue = "other"  # type: ignore[misc]
    with pytest.raises(InvalidJob, match="priority"):
        options.using(priority=9)
    with pytest.raises(InvalidJob, match="pass run_at or run_in, not both"):
        changed.using(run_at=dt.datetime.now(dt.UTC))
    with pytest.raises(InvalidJob, match="both unique and depend"):
        options.using(unique=Unique(), depends_on=[1])
    with pytest.raises(TypeError, match=r"unexpected keyword arguments: \['retries'\]"):
        options.using(retries=3)  # type: ignore[call-arg]


def test_stored_forms_are_computed_once():
    options = base(ordering_key=b"\x01", metadata={"a": 1})
    assert options.stored_ordering_key == "x01"
    assert options.metadata_json == '{"a":1}'
    assert options.stored_metadata() is options.metadata_json


def test_stored_metadata_round_trips():
    options = base(metadata={"a": 1}, depends_on=[3, 2, 3], on_dependency_failure="run")
    text = options.stored_metadata("k", 4, "00-trace")
    assert json.loads(text) == {
        "a": 1,
        CONCURRENCY_KEY: "k",
        CONCURRENCY_LIMIT: 4,
        DEPENDS_ON: [3, 2],
        ON_FAILURE: "run",
        TRACEPARENT_KEY: "00-trace",
    }
    assert StoredOptions.read(json.loads(text)) == StoredOptions("k", 4, (3, 2), "run", "00-trace")
    assert StoredOptions.read({}) == StoredOptions()


def test_a_traceparent_given_in_metadata_wins():
    options = base(metadata={TRACEPARENT_KEY: "mine"})
    assert json.loads(options.stored_metadata(traceparent="ours")) == {TRACEPARENT_KEY: "mine"}


def _imports(path: Path) -> set[str]:
    """The modules ``path`` imports, relative ones resolved inside the package."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            anchor = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            name = ".".join(filter(None, (anchor, node.module)))
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


@pytest.mark.parametrize("module", ["options", "routing"])
def test_the_domain_stays_pure(module):
    """Nothing ``domain`` imports, however indirectly within the package,
    reaches the ORM, psycopg or asyncio."""
    seen: set[str] = set()
    todo = [f"awa_django.domain.{module}"]
    while todo:
        name = todo.pop()
        if name in seen or name == "awa_django":  # the package's API, not a dependency
            continue
        seen.add(name)
        assert not name.startswith(("django.db", "psycopg", "asyncio")), name
        if not name.startswith("awa_django."):
            continue
        relative = Path(*name.split(".")[1:])
        for path in (PACKAGE / relative.with_suffix(".py"), PACKAGE / relative / "__init__.py"):
            if path.is_file():
                todo.extend(_imports(path))
