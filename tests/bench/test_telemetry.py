"""``awa_bench --telemetry both``: the drain off and on, in the same run."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from awa_django.observability.hooks import observers
from awa_django.observability.otel import OtelObserver
from bench.stages import telemetry

# Asserts on time: one xdist process runs the "timing" modules in turn.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.xdist_group("timing")]


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_telemetry_both_reports_the_ratio_of_a_real_recording(tmp_path, queue):
    installed = observers.of_type(OtelObserver)
    report_path = tmp_path / "bench.json"
    out = io.StringIO()
    call_command(
        "awa_bench",
        "--jobs",
        "100",
        "--workers",
        "16",
        "--queue",
        queue,
        "--skip",
        "enqueue",
        "--skip",
        "latency",
        "--telemetry",
        "both",
        "--json",
        str(report_path),
        stdout=out,
    )
    result = json.loads(report_path.read_text())["results"]["telemetry"]
    assert result["rounds"] == telemetry.ROUNDS and result["jobs_per_round"] == 100
    # Every "on" job was a span that reached the (discarding) exporter.
    assert result["spans_exported"] == 100 * telemetry.ROUNDS
    assert result["metric_exports"] >= telemetry.ROUNDS  # at least the final flush of each
    assert result["off_jobs_per_s"] > 0 and result["on_jobs_per_s"] > 0
    assert result["on_over_off"] == pytest.approx(
        result["on_jobs_per_s"] / result["off_jobs_per_s"], rel=0.01
    )
    assert result["on_cpu_us_per_job"] > 0 and result["sampler"]
    assert "telemetry.on_over_off" in out.getvalue()
    # The observer the app installed is back, and no benchmark observer stayed.
    assert [o for o in observers if isinstance(o, OtelObserver)] == [installed]
