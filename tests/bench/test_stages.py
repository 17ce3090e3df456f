"""The comparison stages of ``awa_bench`` that live in bench/stages: ``--atomic``
and ``--oversupply`` (``--telemetry``: test_telemetry.py)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from awa_django import ops
from bench.stages import atomic as bench_atomic

worker_test = pytest.mark.django_db(transaction=True)


@pytest.fixture
def clean(reset_awa):
    yield


# --- awa_bench --atomic -------------------------------------------------------------------


@worker_test
def test_awa_bench_atomic_reports_the_drain_ratio(tmp_path, queue, clean):
    report_path = tmp_path / "bench.json"
    out = io.StringIO()
    call_command(
        "awa_bench",
        "--jobs",
        "100",
        "--queue",
        queue,
        "--skip",
        "enqueue",
        "--skip",
        "drain",
        "--skip",
        "latency",
        "--atomic",
        "--json",
        str(report_path),
        stdout=out,
    )
    result = json.loads(report_path.read_text())["results"]["atomic"]
    assert result["rounds"] == bench_atomic.ROUNDS and result["jobs_per_round"] == 100
    assert result["workers"] == bench_atomic.MAX_WORKERS  # --workers 512, capped
    assert result["plain_jobs_per_s"] > 0 and result["atomic_jobs_per_s"] > 0
    assert result["atomic_over_plain"] == pytest.approx(
        result["atomic_jobs_per_s"] / result["plain_jobs_per_s"], rel=0.01
    )
    assert "atomic.atomic_over_plain" in out.getvalue()
    counts = ops.queue_counts(queue)
    assert counts["completed"] == 2 * 100 * bench_atomic.ROUNDS
    assert counts["available"] == counts["running"] == counts["failed"] == 0


# --- the benchmark ------------------------------------------------------------------


def test_the_oversupply_benchmark_runs_and_stays_bounded(tmp_path, queue, reset_awa):
    report_path = tmp_path / "bench.json"
    out = io.StringIO()
    call_command(
        "awa_bench",
        "--oversupply",
        "100",
        "--jobs",
        "300",
        "--producers",
        "2",
        "--duration",
        "1",
        "--queue",
        queue,
        "--json",
        str(report_path),
        stdout=out,
    )
    result = json.loads(report_path.read_text())["results"]["oversupply"]
    assert result["errors"] == [] and result["refused_batches"] == 0
    assert result["offered_jobs_per_s"] == pytest.approx(3 * result["drain_jobs_per_s"], abs=1)
    depth = result["depth"]
    assert depth["samples"] > 0 and depth["bound"] == 100 + 2 * result["batch_size"]
    assert depth["max"] <= depth["bound"] and depth["bounded"] == "yes"
    assert "oversupply.depth.max" in out.getvalue()
    assert ops.queue_depth(queue) == 0  # drained before it returned


def test_the_oversupply_benchmark_rejects_a_negative_limit():
    with pytest.raises(CommandError, match="--oversupply"):
        call_command("awa_bench", "--oversupply", "-1")
