"""results.json turned into results.md and results.png.

The report is derived from results.json alone, so an old run's report can
be written again after a change here.
"""

from __future__ import annotations

import math
from pathlib import Path


def fmt(value, digits: int = 0, suffix: str = "") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if digits == 0:
            return f"{value:,.0f}{suffix}"
        return f"{value:,.{digits}f}{suffix}"
    return f"{value:,}{suffix}"


def fmt_bytes(value) -> str:
    if value is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return str(value)


def row_label(r: dict) -> str:
    """The system's label, with a mark when other work disturbed its run."""
    disturbed = r.get("disturbed", False)
    return r["label"] + (" ⚠" if disturbed else "")


def markdown(results: dict) -> str:
    meta = results["meta"]
    params = meta["params"]
    lines = [
        "# Peer benchmark results",
        "",
        f"Run {meta['machine']['date']} on {meta['machine']['nproc']} CPUs "
        f"({meta['machine']['processor']}, {meta['machine']['memory']} RAM), "
        f"{meta['postgres']['version'].split(' on ')[0]}"
        + (f", Redis {meta['redis_version']}" if meta.get("redis_version") else "")
        + (
            f"; awa_django at commit `{meta['repo']['commit'][:10]}`"
            + (
                " with uncommitted changes"
                if meta["repo"]["awa_django_uncommitted_changes"]
                else ""
            )
            if meta.get("repo", {}).get("commit")
            else ""
        )
        + ". Reproduce with `bash bench/run.sh"
        + (" --quick" if params["quick"] else "")
        + "`.",
        "",
        f"N = {params['n']:,} no-op jobs (W1/W2); W3 = {params['w3_rate']:g} jobs/s for "
        f"{params['w3_seconds']:g} s; W4 = {params['w4_rate']:g} jobs/s offered for "
        f"{params['w4_seconds']:g} s (Postgres sampled at {params['w4_sample_at']:g} s "
        "and at the end). "
        "One worker process per system; every system runs alone, one after another, in a fresh "
        "database.",
        "",
        "## Throughput and latency",
        "",
        "| System | W1 bulk enqueue (jobs/s) | W2 drain, 1 worker (jobs/s) "
        "| W3 pickup p50 / p95 / p99 (ms) "
        "| W4 offered → achieved (jobs/s) | W4 queue depth at end | W4 pickup p99 (ms) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["systems"]:
        if r["status"] != "ok" and "w1" not in r:
            lines.append(f"| {r['label']} | {r['status']}: {r.get('error', '')[:160]} | | | | | |")
            continue
        w1, w2, w3, w4 = (r.get(k) or {} for k in ("w1", "w2", "w3", "w4"))
        w3_cell = (
            f"{fmt(w3.get('p50_ms'), 1)} / {fmt(w3.get('p95_ms'), 1)} / {fmt(w3.get('p99_ms'), 1)}"
            if w3
            else "—"
        )
        w4_cell = (
            f"{fmt(w4.get('offered_rate'))} → {fmt(w4.get('achieved_jobs_per_s'))}" if w4 else "—"
        )
        label = row_label(r) + ("" if r["status"] == "ok" else f" ({r['status']}: see notes)")
        lines.append(
            f"| {label} | {fmt(w1.get('jobs_per_s'))} | {fmt(w2.get('jobs_per_s'))} | {w3_cell} "
            f"| {w4_cell} | {fmt(w4.get('queue_depth_at_end'))} "
            f"| {fmt((w4.get('latency') or {}).get('p99_ms'), 1)} |"
        )
    lines += [
        "",
        "## PostgreSQL side",
        "",
        "W1+W2 columns cover the bulk enqueue and the drain of the N jobs (WAL is cluster-wide). "
        "Dead tuples and sizes are summed over every user table of the system's database.",
        "",
        "| System | WAL bytes / job (W1+W2) | commits / job (W1+W2) | dead tuples after drain "
        "| W4 dead tuples @sample / end | W4 table size @sample / end |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results["systems"]:
        pgw = r.get("pg_w1w2")
        w4 = r.get("w4") or {}
        if not r.get("postgres", True):
            lines.append(f"| {row_label(r)} | n/a | n/a | n/a | n/a | n/a |")
            continue
        if not pgw:
            lines.append(f"| {row_label(r)} | — | — | — | — | — |")
            continue
        sample, end = w4.get("pg_at_sample") or {}, w4.get("pg_at_end") or {}
        lines.append(
            f"| {row_label(r)} | {fmt(pgw['wal_bytes_per_job'])} "
            f"| {fmt(pgw['commits_per_job'], 3)} "
            f"| {fmt(pgw['dead_tuples_after_drain'])} "
            f"| {fmt(sample.get('dead_tuples'))} / {fmt(end.get('dead_tuples'))} "
            f"| {fmt_bytes(sample.get('total_bytes'))} / {fmt_bytes(end.get('total_bytes'))} |"
        )
    lines += [
        "",
        "## What each system ran with",
        "",
        "| System | Concurrency | Configuration | Bulk path (W1) | Single enqueue (W3/W4) "
        "| Versions |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["systems"]:
        c = r.get("config") or {}
        v = r.get("versions") or {}
        packages = ", ".join(f"{k} {val}" for k, val in sorted((v.get("packages") or {}).items()))
        version_cell = (f"Python {v['python']}; " if v.get("python") else "") + packages
        lines.append(
            f"| {r['label']} | {c.get('concurrency', '—')} | {c.get('config', '—')} "
            f"| {c.get('bulk_path', '—')} | {c.get('single_path', '—')} | {version_cell or '—'} |"
        )
    notes = [n for n in meta.get("notes", [])]
    for r in results["systems"]:
        if r.get("error"):
            notes.append(f"**{r['label']}**: {r['status']} — {r['error']}")
        for w in r.get("warnings", []):
            notes.append(f"**{r['label']}**: {w}")
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += [
        "",
        "PostgreSQL settings: "
        + ", ".join(f"`{k}={v}`" for k, v in sorted(meta["postgres"]["settings"].items()))
        + ".",
        "",
        "![W2 drain throughput and W3 p99 pickup latency](results.png)",
        "",
    ]
    return "\n".join(lines)


def chart(results: dict, path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no chart: {exc}"
    rows = [r for r in results["systems"] if (r.get("w2") or r.get("w3"))]
    if not rows:
        return "no chart: no system produced W2/W3 results"
    labels = [r["label"] for r in rows]
    drain = [(r.get("w2") or {}).get("jobs_per_s") or 0 for r in rows]
    p99 = [(r.get("w3") or {}).get("p99_ms") or 0 for r in rows]
    colors = ["#1f77b4" if r["key"].startswith("awa") else "#7f7f7f" for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    ax1.barh(labels, drain, color=colors)
    ax1.set_xlabel("jobs/s (higher is better)")
    ax1.set_title(f"W2: drain of {results['meta']['params']['n']:,} no-op jobs, 1 worker")
    for i, v in enumerate(drain):
        ax1.text(v, i, f" {v:,.0f}", va="center", fontsize=8)
    ax2.barh(labels, p99, color=colors)
    ax2.set_xscale("log")
    positive = [v for v in p99 if v > 0]
    if positive:  # whole decades, so that bar lengths compare honestly
        ax2.set_xlim(
            10 ** math.floor(math.log10(min(positive))),
            10 ** math.ceil(math.log10(max(positive) * 2)),
        )
    ax2.set_xlabel("ms, log scale (lower is better)")
    ax2.set_title(f"W3: p99 pickup latency at {results['meta']['params']['w3_rate']:g} jobs/s")
    for i, v in enumerate(p99):
        if v:
            ax2.text(v, i, f" {v:,.1f}", va="center", fontsize=8)
    for ax in (ax1, ax2):
        ax.invert_yaxis()
        ax.grid(axis="x", alpha=0.3)
    m = results["meta"]
    fig.suptitle(
        f"{m['machine']['nproc']} CPUs, {m['postgres']['version'].split(' on ')[0]}, "
        f"{m['machine']['date'][:10]}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
