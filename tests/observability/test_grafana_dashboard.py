"""The example Grafana dashboard (docs/grafana/awa-dashboard.json) names real metrics.

Every PromQL expression of the dashboard -- panel targets and template
variable queries -- is reduced to the metric names it selects, and each must
be one the Prometheus exporter declares: the names generated from the table
in ``awa_django.observability.metrics`` (``_bucket``, ``_sum`` and ``_count``
of histograms included), and the names a real worker's ``/metrics`` exposes
once it has run a few jobs.  A renamed metric therefore fails here instead
of leaving a dashboard panel silently empty.
"""

from __future__ import annotations

import json
import re

import pytest
from testapp import jobs

from awa_django import ops
from awa_django.observability import metrics
from awa_django.observability.prometheus import metric_names
from tests.conftest import ROOT, wait_for
from tests.observability.probes import WORKER_ENV, ProbedWorker, metric_families, ready

DASHBOARD = ROOT / "docs" / "grafana" / "awa-dashboard.json"

# What may precede "(" in PromQL without being a metric: functions and aggregations.
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# Not inside a number or a duration (1e3, 5m).
_WORD = re.compile(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
_LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,")


def selected_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression selects."""
    text = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    text = _STRINGS.sub('""', text)
    text = _MATCHERS.sub("", text)  # label matchers, with the $variables inside them
    text = _RANGES.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for match in _WORD.finditer(text):
        word = match.group()
        after = text[match.end() :].lstrip()
        if after.startswith("(") or word.lower() in _KEYWORDS:
            continue  # a function or an aggregation, or an operator
        names.add(word)
    return names


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(document: dict) -> list[dict]:
    found = []
    for panel in document["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))  # a collapsed row keeps its panels inside
    return found


def expressions(document: dict) -> list[str]:
    exprs = [
        target["expr"]
        for panel in panels(document)
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    for variable in document["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable["type"] == "query" and isinstance(query, str):
            exprs.extend(f"{name}" for name in _LABEL_VALUES.findall(query))
    return exprs


def dashboard_metrics() -> set[str]:
    return {name for expr in expressions(dashboard()) for name in selected_metrics(expr)}


def test_the_extractor_finds_metrics_and_nothing_else():
    assert selected_metrics(
        "histogram_quantile(0.95, sum by (le) "
        '(rate(awa_job_duration_seconds_bucket{queue=~"$queue"}[$__rate_interval])))'
    ) == {"awa_job_duration_seconds_bucket"}
    assert selected_metrics(
        'sum by (queue) (rate(a_total[5m])) / sum by (queue) (rate(b_total{x="y"}[5m]))'
    ) == {"a_total", "b_total"}
    assert selected_metrics("sum(up) by (instance) > bool 0 and on (job) c") == {"up", "c"}
    assert selected_metrics('max(awa_queue_lag_seconds{queue=~"a|b"}) offset 5m') == {
        "awa_queue_lag_seconds"
    }


def test_every_metric_the_dashboard_names_is_one_the_exporter_declares():
    named = dashboard_metrics()
    declared = metric_names()
    assert named - declared == set(), "the dashboard names metrics the exporter does not have"
    # It covers the table broadly, not one panel's worth.
    assert len(named) >= 15
    for metric in (metrics.OUTCOMES, metrics.JOB_DURATION, metrics.QUEUE_DEPTH, metrics.ROTATIONS):
        assert any(name.startswith(metrics.prometheus_name(metric)) for name in named)


def test_the_dashboard_is_a_well_formed_grafana_document():
    document = dashboard()
    assert document["uid"] and document["title"] and document["schemaVersion"] >= 36
    ids = [panel["id"] for panel in panels(document)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {variable["name"] for variable in document["templating"]["list"]}
    assert {"datasource", "queue"} <= variables
    for panel in panels(document):
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            # Balanced brackets: a typo Grafana would only show as a panel error.
            for opening, closing in ("()", "{}", "[]"):
                expr = target["expr"]
                assert expr.count(opening) == expr.count(closing), (panel["title"], expr)


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_exposes_every_metric_of_the_dashboard(reset_awa, queue, start_worker):
    for n in range(5):
        jobs.plain.using(queue=queue).enqueue(n)
    jobs.fail_then_succeed.using(queue=queue).enqueue(1)
    env = {
        **WORKER_ENV,
        # Ring ticks every second, so that rotate and prune have reported.
        "AWA_SETTINGS_JSON": json.dumps(
            {"QUEUE_ROTATE_INTERVAL": 1, "CLAIM_ROTATE_INTERVAL": 1, "LEASE_ROTATE_INTERVAL": 1}
        ),
    }
    worker = ProbedWorker(start_worker("--queue", queue, "--health-addr", "127.0.0.1:0", env=env))
    worker.poll("/readyz", ready)
    wait_for(lambda: ops.queue_counts(queue)["completed"] == 6, timeout=60)

    def exposed() -> set[str]:
        families = metric_families(worker.get("/metrics").body.decode())
        names = set()
        for family in families.values():
            if family.type == "counter":
                names.add(f"{family.name}_total")
            elif family.type == "histogram":
                names.update(f"{family.name}{suffix}" for suffix in ("_bucket", "_sum", "_count"))
            else:
                names.add(family.name)
        recorded = {sample.name for family in families.values() for sample in family.samples}
        # Declared, and recorded for what this worker has surely done by now.
        wanted = {"awa_job_outcomes_total", "awa_maintenance_rotate_total", "awa_runtime_up"}
        return names if wanted <= recorded else set()

    names = wait_for(exposed, timeout=30)
    assert dashboard_metrics() - names == set()
