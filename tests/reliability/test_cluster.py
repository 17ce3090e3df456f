"""The throwaway cluster itself: an immediate restart is a crash, teardown leaves nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.reliability.conftest import ThrowawayCluster, pg_bin_dir, run_as

pytestmark = pytest.mark.chaos


def test_immediate_restart_is_a_crash_that_keeps_synchronous_commits(pg_cluster):
    with pg_cluster.connect() as conn:
        assert conn.execute("SHOW fsync").fetchone()[0] == "on"
        conn.execute("CREATE TABLE kept (i int)")
        conn.execute("INSERT INTO kept VALUES (1)")  # synchronous_commit = on
        started = conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]

    pg_cluster.restart(mode="immediate")

    with pg_cluster.connect() as conn:
        assert conn.execute("SELECT count(*) FROM kept").fetchone()[0] == 1
        assert conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0] > started
    # Not a clean shutdown: the server ran crash recovery at start-up.
    assert "automatic recovery in progress" in pg_cluster.log_path.read_text()


def test_teardown_removes_a_running_cluster():
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) found; set AWA_PG_BIN")
    cluster = ThrowawayCluster(bin_dir, run_as(), {})
    try:
        cluster.init()
        cluster.start()
        with cluster.connect() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        if os.geteuid() == 0:  # PostgreSQL refuses root: the server runs as nobody
            status = Path(f"/proc/{cluster.postmaster_pid()}/status").read_text()
            uid = next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:"))
            assert int(uid) != 0
    finally:
        cluster.destroy()
    assert not cluster.base.exists()
    assert not cluster.running
