"""The console on a 1,000,000-job database: bounded queries, no counting history.

The million jobs live in a database of their own (created here, dropped
afterwards), filled with COPY by a subprocess, so the shared test database
stays small.  Load times are recorded in ``tests/artifacts/console-scale.json``
for the record, not asserted: performance is measured by benchmarks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import psycopg
import pytest

from awa_django.ops.jobs import BROWSE_SCAN
from tests.conftest import ROOT, database_url, manage

JOBS = int(os.environ.get("AWA_SCALE_JOBS", "1000000"))
#: Queries a page may issue: session and user, the read-only probe, the
#: page's own reads (a page, the counters, the kind list, ...).
MAX_QUERIES = 12
#: Rows of the job tables a page may read: the browser searches at most
#: BROWSE_SCAN ids a page, and an id has a row in at most two of those
#: tables (its ready row and its terminal row).  Reading the history instead
#: (a plan driven from the claim cursors read ~12 rows per id) fails this.
MAX_ROWS_READ = 2 * BROWSE_SCAN


@pytest.fixture
def scale_url(db):
    base = database_url()
    name = f"awa_scale_{uuid.uuid4().hex[:8]}"
    url = database_url(name)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        done = manage("migrate", "--verbosity", "0", database_url_override=url, timeout=300)
        assert done.returncode == 0, done.stderr
        yield url
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def probe(url: str, *args: str) -> dict:
    env = {**os.environ, "DATABASE_URL": url, "CONN_MAX_AGE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.django.console_probe", *args],
        cwd=ROOT,
        env={**env, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'testproject'}"},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.heavy
def test_console_pages_on_a_million_jobs(scale_url):
    filled = probe(scale_url, "fill", str(JOBS))
    report = probe(scale_url, "pages")
    assert report["jobs"] == JOBS + 1  # the exact counters (+ one cancelled job)
    artifacts = ROOT / "tests" / "artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "console-scale.json").write_text(
        json.dumps({"fill": filled, **report}, indent=2) + "\n"
    )
    for page in report["pages"]:
        assert page["status"] == 200, page
        assert page["queries"] <= MAX_QUERIES, page
        assert not page["counts_history"], page
        assert page["job_rows_read"] <= MAX_ROWS_READ, page
