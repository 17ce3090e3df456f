"""``manage.py awa_bench``: a tiny run of every default and focused stage, argument errors,
and the message when a repository stage is not there."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from awa_django import ops
from awa_django.management import bench_hops
from awa_django.management.commands import awa_bench

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _clean(reset_awa):
    yield


def test_awa_bench_smoke(tmp_path, queue):
    """The benchmark cannot rot: a tiny run of every stage (N=200)."""
    report_path = tmp_path / "bench.json"
    out = io.StringIO()
    call_command(
        "awa_bench",
        "--jobs",
        "200",
        "--workers",
        "32",
        "--rate",
        "50",
        "--duration",
        "1",
        "--queue",
        queue,
        "--json",
        str(report_path),
        stdout=out,
    )
    report = json.loads(report_path.read_text())["results"]
    assert report["copy_enqueue"]["jobs"] == 200 and report["copy_enqueue"]["jobs_per_s"] > 0
    assert report["single_enqueue"]["jobs"] == 200
    assert report["drain"]["jobs"] == 200
    drain = report["drain"]
    assert drain["claims"] - drain["empty_claims"] >= 7  # 200 jobs, at most 32 per claim
    assert 0 < drain["claims_per_job"] < 1
    assert report["latency"]["claims_per_job"] > 0
    assert report["latency"]["completed"] == report["latency"]["sent"] == 50
    assert report["latency"]["pickup"]["p99_ms"] > 0
    assert report["postgres_per_job"]["wal_bytes_per_job"] > 0
    assert "drain.jobs_per_s" in out.getvalue()


def test_awa_bench_latency_with_workers_in_process_counts_their_claims(tmp_path, queue):
    """--processes 2: the latency stage runs two workers in this process, both
    woken by each NOTIFY, and reports their claim statements per job."""
    report_path = tmp_path / "bench.json"
    call_command(
        "awa_bench",
        *("--processes", "2", "--skip", "enqueue", "--skip", "drain"),
        *("--rate", "40", "--duration", "0.5", "--queue", queue, "--json", str(report_path)),
        stdout=io.StringIO(),
    )
    latency = json.loads(report_path.read_text())["results"]["latency"]
    assert latency["workers_in_process"] == 2 and latency["completed"] == 20
    assert latency["claims"] >= latency["empty_claims"] >= 0
    assert latency["claims_per_job"] == round(latency["claims"] / 20, 3)


def test_awa_bench_backlog_and_serial_stages(tmp_path, queue):
    """--backlog and --serial run only the focused stages (small sizes here)."""
    report_path = tmp_path / "bench.json"
    out = io.StringIO()
    call_command(
        "awa_bench",
        *("--backlog", "5,60", "--backlog-claims", "10", "--serial", "30"),
        *("--queue", queue, "--json", str(report_path)),
        stdout=out,
    )
    report = json.loads(report_path.read_text())["results"]
    assert set(report) == {"storage_before", "backlog", "serial"}
    by_size = report["backlog"]["by_backlog"]
    assert set(by_size) == {"5", "60"}
    assert all(entry["claims"] == 10 and entry["p50_ms"] > 0 for entry in by_size.values())
    assert report["backlog"]["p50_max_over_min"] >= 1
    serial = report["serial"]
    assert serial["jobs"] == 30 and serial["rounds"] == 1
    assert serial["worker_jobs_per_s"] > 0 and serial["floor_jobs_per_s"] > 0
    assert serial["worker_over_floor"] > 0
    assert "serial.worker_over_floor" in out.getvalue()
    # Nothing left behind: the backlog was drained, the serial queues emptied.
    counts = [
        ops.queue_counts(f"{queue}.{name}") for name in ("backlog5", "backlog60", "serial", "floor")
    ]
    assert all(c.get("available", 0) == 0 and c.get("running", 0) == 0 for c in counts), counts


def test_awa_bench_rejects_bad_arguments():
    with pytest.raises(CommandError):
        call_command("awa_bench", "--jobs", "0")
    with pytest.raises(CommandError, match="--backlog"):
        call_command("awa_bench", "--backlog", "100,zero")
    with pytest.raises(CommandError, match="--serial"):
        call_command("awa_bench", "--serial", "1")


def test_a_repository_stage_outside_the_repository_says_where_it_lives(monkeypatch):
    """bench/stages is not in the wheel: an installation without it gets a clear
    error for the options that need it, not an ImportError."""
    monkeypatch.setattr(awa_bench, "STAGES_PACKAGE", "awa_no_such_checkout.stages")
    with pytest.raises(CommandError, match="checkout of the awa_django repository"):
        call_command("awa_bench", "--serial", "10", stdout=io.StringIO())


def test_awa_bench_latency_breaks_pickups_down_hop_by_hop(tmp_path, queue):
    """The latency stage reports each hop of the pickup path; every hop is a
    difference of consecutive readings of one job, so none is negative and
    the hops' means add up to the mean total (within the microsecond
    rounding of each).  Every job finished is accounted for: broken down,
    or counted under why it was left out."""
    report_path = tmp_path / "bench.json"
    out = io.StringIO()
    call_command(
        "awa_bench",
        *("--skip", "enqueue", "--skip", "drain", "--rate", "40", "--duration", "0.5"),
        *("--queue", queue, "--json", str(report_path)),
        stdout=out,
    )
    latency = json.loads(report_path.read_text())["results"]["latency"]
    hops = latency["hops"]
    assert hops["jobs"] > 0
    assert hops["jobs"] + sum(hops["excluded"].values()) == latency["completed"] == 20
    for name in (*bench_hops.HOPS, "total"):
        assert set(hops[name]) == {"p50_ms", "p95_ms", "p99_ms", "mean_ms"}
        assert all(value >= 0 for value in hops[name].values()), name
        assert hops[name]["p50_ms"] <= hops[name]["p95_ms"] <= hops[name]["p99_ms"]
    means = sum(hops[name]["mean_ms"] for name in bench_hops.HOPS)
    assert means == pytest.approx(hops["total"]["mean_ms"], abs=0.001 * len(bench_hops.HOPS))
    assert hops["total"]["mean_ms"] > 0
    assert "pickup hops" in out.getvalue() and "handler_to_close" in out.getvalue()
