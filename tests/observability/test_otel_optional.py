"""OpenTelemetry stays optional: nothing imports it when the extra is absent
(or switched off), and ``TELEMETRY=True`` without it is a system check error.

The import tests run a fresh interpreter: django.setup(), an enqueue and a
burst of ``awa_worker`` in one process, then report whether any
``opentelemetry`` module was ever loaded.  "The extra is absent" is a
meta-path finder refusing every ``opentelemetry`` import, installed before
anything else runs.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from awa_django.observability import install
from awa_django.observability.hooks import observers
from awa_django.observability.otel import OtelObserver
from tests.conftest import ROOT, database_url, python_output

BLOCK_OPENTELEMETRY = """
import importlib.abc, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Absent())
"""

JOB_LIFE = """
import json, os, sys
import django
from django.core.management import call_command

django.setup()
from awa_django import ops
from awa_django.observability.hooks import observers
from testapp import jobs

queue = os.environ["TEST_QUEUE"]
ref = jobs.plain.using(queue=queue).enqueue(20, b=22)
call_command("awa_worker", "--burst", "--queue", queue, "--no-maintenance")
info = ops.get_job(ref.id)
print(json.dumps({
    "state": info.state,
    "value": info.return_value,
    "observers": sorted(type(o).__name__ for o in observers),
    "otel": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"),
}))
"""


def run_job_life(queue: str, *, prelude: str = "", awa: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        DJANGO_SETTINGS_MODULE="testproject.settings",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "testproject")]),
        TEST_QUEUE=queue,
        AWA_SETTINGS_JSON=json.dumps(awa or {}),
    )
    return json.loads(python_output(textwrap.dedent(prelude) + textwrap.dedent(JOB_LIFE), env)[-1])


@pytest.mark.django_db(transaction=True)
def test_without_the_extra_a_job_runs_and_opentelemetry_is_never_imported(reset_awa, queue):
    report = run_job_life(queue, prelude=BLOCK_OPENTELEMETRY)
    assert (report["state"], report["value"]) == ("completed", 42)
    assert report["otel"] == []
    assert "OtelObserver" not in report["observers"]


@pytest.mark.django_db(transaction=True)
def test_telemetry_false_never_imports_it_even_when_installed(reset_awa, queue):
    report = run_job_life(queue, awa={"TELEMETRY": False})
    assert (report["state"], report["value"]) == ("completed", 42)
    assert report["otel"] == []
    # The control: with the package present and "auto", it is imported and used.
    auto = run_job_life(queue)
    assert "opentelemetry.trace" in auto["otel"] and "OtelObserver" in auto["observers"]


def test_telemetry_true_without_opentelemetry_is_a_check_error(monkeypatch):
    with override_settings(AWA={"TELEMETRY": True}):
        assert "awa_django.E005" not in {m.id for m in run_checks()}
        # As if the extra were not installed: the import fails.
        monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)
        [error] = [m for m in run_checks() if m.id == "awa_django.E005"]
    assert "cannot be imported" in error.msg and "awa-django[otel]" in error.hint
    with override_settings(AWA={"TELEMETRY": "auto"}):
        assert "awa_django.E005" not in {m.id for m in run_checks()}


def test_install_registers_one_observer_honouring_trace_capture():
    registered = list(observers)
    installed = observers.of_type(OtelObserver)
    assert installed is not None  # the app's ready() did: "auto" and the package is here
    observers.remove(installed)
    try:
        with override_settings(AWA={"TRACE_CAPTURE": False}):
            install.install()
            install.install()  # idempotent
            mine = [o for o in observers if isinstance(o, OtelObserver)]
            assert len(mine) == 1 and mine[0].trace_capture is False
            observers.remove(mine[0])
        with override_settings(AWA={"TELEMETRY": False}):
            install.install()
            assert observers.of_type(OtelObserver) is None
    finally:
        for observer in list(observers):
            observers.remove(observer)
        for observer in registered:
            observers.add(observer)


def test_without_an_sdk_tracer_provider_no_span_scope_is_built():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import NoOpTracerProvider

    installed = observers.of_type(OtelObserver)
    # The test process never sets a global tracer provider: the API's proxy.
    assert installed is not None and installed.scoped is False
    assert OtelObserver(tracer_provider=NoOpTracerProvider()).scoped is False
    assert OtelObserver(tracer_provider=TracerProvider()).scoped is True
    assert not observers.scoped  # nothing builds a scope per job or enqueue
