"""Chaos scenarios under load: no job lost, none completed twice, recovery measured.

Each test runs one :class:`~tests.reliability.chaos.Scenario` through
:func:`~tests.reliability.chaos.run_scenario`: a producer enqueues
``chaos_probe`` jobs at a steady rate, two ``awa_worker`` processes drain
them, a fault strikes, and the run is accounted job by job (see
tests/reliability/chaos.py).  All scenarios share one throwaway cluster
(small ``max_connections``) and each gets a fresh database copied from a
migrated template, so no fault reaches the suite's own server or another
scenario.

Bounded by default (sustained faults last ``AWA_CHAOS_SECONDS`` = 10 s,
repeated kills twice that); soak mode (``make soak``) raises it.  The
module writes its table to ``AWA_CHAOS_REPORT_DIR`` (default
tests/artifacts/) as chaos-<timestamp>.md and .json.
"""

from __future__ import annotations

import os
import random
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.reliability import chaos
from tests.reliability import report as report_
from tests.reliability.chaos import ChaosRun, Scenario
from tests.reliability.conftest import ThrowawayCluster, pg_bin_dir, run_as

# One xdist worker runs every scenario: they share the module's cluster.
pytestmark = [pytest.mark.chaos, pytest.mark.heavy, pytest.mark.xdist_group("chaos")]


@pytest.fixture(scope="module")
def chaos_cluster():
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) found; set AWA_PG_BIN")
    cluster = ThrowawayCluster(bin_dir, run_as(), chaos.CLUSTER_SETTINGS)
    try:
        cluster.init()
        cluster.start()
        shared = chaos.ChaosCluster(cluster)
        shared.migrate_template()
        yield shared
    finally:
        cluster.destroy()


@pytest.fixture(scope="module")
def report():
    results: list[chaos.Result] = []
    yield results
    if not results:
        return
    directory = Path(os.environ.get("AWA_CHAOS_REPORT_DIR") or ROOT / "tests" / "artifacts")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    md, _ = report_.write_report(
        [r.row() for r in results],
        directory / f"chaos-{stamp}",
        {
            "title": f"bounded chaos run {stamp}",
            "fault_seconds": chaos.fault_seconds(),
            "max_rate_jobs_per_s": chaos.RATE,
            "workers": f"{chaos.PROCESSES} x {chaos.PERMITS} permits, {chaos.WORK_MS} ms a job",
            "heartbeat_staleness_s": chaos.STALENESS,
        },
    )
    print(f"\nchaos report: {md}\n{md.read_text()}")


def run(chaos_cluster, report, scenario: Scenario) -> chaos.Result:
    result = chaos.run_scenario(chaos_cluster, scenario, report)
    print(f"\n{report_.markdown_table([result.row()])}\nnotes: {result.notes}")
    chaos.check(result, scenario)
    return result


def replace_worker(run_: ChaosRun, worker) -> None:
    """SIGKILL ``worker`` and start a replacement, as a process manager would."""
    run_.kill(worker)
    run_.start_worker()


# --- kill -9 -------------------------------------------------------------------------


def kill_leader(run_: ChaosRun) -> None:
    leader = run_.by_pid(run_.leader_pid()) or run_.workers[0]
    run_.notes["aimed"] = run_.when_busy(leader)
    run_.fault_started()
    replace_worker(run_, leader)
    run_.fault_ended()
    survivors = {w.pid for w in run_.workers}
    run_.wait_until(lambda: run_.leader_pid() in survivors, 60, "a new leader after the kill")
    run_.notes["failover_s"] = round(run_.now() - run_.fault_start, 2)


def test_kill_9_of_the_leading_worker(chaos_cluster, report):
    run(chaos_cluster, report, Scenario("kill-9", kill_leader, crash=True))


def kill_repeatedly(run_: ChaosRun) -> None:
    """Every 3 s, SIGKILL a random registered worker and start a replacement."""
    duration = 2 * chaos.fault_seconds()
    rng = random.Random()
    kills = 0
    run_.fault_started()
    started = time.monotonic()
    for due in range(0, int(duration), KILL_EVERY):  # a kill every KILL_EVERY seconds
        time.sleep(max(0.0, started + due - time.monotonic()))
        registered = run_.registered()
        ready = [w for w in run_.workers if w.pid in registered]
        if ready:  # a replacement still starting up is not killed again
            victim = rng.choice(ready)
            run_.when_busy(victim, timeout=1)
            replace_worker(run_, victim)
            kills += 1
    run_.fault_ended()
    run_.notes["kills"] = kills


KILL_EVERY = 3


def test_repeated_kills(chaos_cluster, report):
    result = run(chaos_cluster, report, Scenario("repeated-kills", kill_repeatedly, crash=True))
    # On a loaded machine a kill may find no registered worker: most still land.
    assert result.notes["kills"] >= 2 * chaos.fault_seconds() / KILL_EVERY / 2, result.notes


# --- the server ------------------------------------------------------------------------


def restart_server(run_: ChaosRun) -> None:
    run_.fault_started()
    run_.cluster.cluster.restart(mode="immediate")
    run_.fault_ended()
    run_.notes["server_down_s"] = round(run_.fault_end - run_.fault_start, 2)
    pids = {w.pid for w in run_.workers}
    run_.wait_until(lambda: run_.leader_pid() in pids, 60, "a leader after the restart")
    run_.notes["leader_back_s"] = round(run_.now() - run_.fault_end, 2)


def test_postgres_restart_in_immediate_mode(chaos_cluster, report):
    run(chaos_cluster, report, Scenario("pg-restart", restart_server, crash=True))


def terminate_sessions(run_: ChaosRun) -> None:
    """Four times a second, ``pg_terminate_backend`` of one of the workers' sessions."""
    terminated = 0
    run_.fault_started()
    ends = time.monotonic() + chaos.fault_seconds()
    while time.monotonic() < ends:
        terminated += chaos.terminate_worker_sessions(run_.conn(), run_.db, 1)
        time.sleep(0.25)
    run_.fault_ended()
    run_.notes["terminated"] = terminated
    assert all(w.alive() for w in run_.workers), run_.logs()


def test_pg_terminate_backend_at_a_steady_rate(chaos_cluster, report):
    result = run(chaos_cluster, report, Scenario("terminate-backend", terminate_sessions, True))
    assert result.notes["terminated"] >= chaos.fault_seconds() * 2


def exhaust_connections(run_: ChaosRun) -> None:
    """Another process holds every connection but 3 for the fault's length."""
    hog = chaos.ConnectionHog(run_.db, spare=3)
    run_.fault_started()
    run_.notes["held_connections"] = hog.held
    try:
        time.sleep(chaos.fault_seconds())
        assert all(w.alive() for w in run_.workers), run_.logs()
    finally:
        hog.release()
        run_.fault_ended()


def test_connection_exhaustion(chaos_cluster, report):
    # Handlers open a connection per job (no persistent connections), so
    # they compete for the few connections the hog leaves.
    scenario = Scenario(
        "conn-exhaustion", exhaust_connections, crash=False, worker_env={"CONN_MAX_AGE": "0"}
    )
    result = run(chaos_cluster, report, scenario)
    assert result.notes["held_connections"] > 30


# --- the MVCC horizon --------------------------------------------------------------------


def pin_horizon(run_: ChaosRun) -> None:
    """A REPEATABLE READ transaction with an xid open for the fault's length."""
    conn = chaos.harness_connect(run_.db, autocommit=False)
    prunes = run_.conn().execute(chaos.PRUNES_SQL).fetchone()[0]
    samples = run_.sampler.snapshot()
    run_.notes["pre_pin_max_size"] = max((s.size for s in samples if s.size), default=0)
    run_.notes["pre_pin_max_dead"] = max(
        (s.dead_tuples for s in samples if s.dead_tuples is not None), default=0
    )
    try:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT txid_current()")
        run_.fault_started()
        # Prune reaches the slots sealed before the pin, then stalls.
        time.sleep(chaos.fault_seconds() / 2)
        halfway = run_.conn().execute(chaos.PRUNES_SQL).fetchone()[0]
        time.sleep(chaos.fault_seconds() / 2)
        pinned = run_.conn().execute(chaos.PRUNES_SQL).fetchone()[0]
        run_.notes["prunes_first_half_of_pin"] = halfway - prunes
        run_.notes["prunes_second_half_of_pin"] = pinned - halfway
        run_.notes["prune_outcomes_at_pin_end"] = dict(
            run_.conn().execute(
                "SELECT ring, outcome FROM awa.ring_status WHERE action = 'prune' ORDER BY ring"
            )
        )
        run_.notes["pinned_prunes_at"] = pinned
    finally:
        conn.rollback()
        conn.close()
        run_.fault_ended()


def horizon_recovered(run_: ChaosRun) -> None:
    """After the pin: prune resumes, dead tuples and size come back down."""
    pinned = run_.notes["pinned_prunes_at"]
    run_.wait_until(
        lambda: run_.conn().execute(chaos.PRUNES_SQL).fetchone()[0] > pinned + 3,
        60,
        "prune resuming after the pin",
    )
    run_.notes["prune_resumed_s"] = round(run_.now() - run_.fault_end, 2)
    samples = run_.sampler.snapshot()
    peak_size = max(s.size for s in samples if s.size)
    peak_dead = max(s.dead_tuples for s in samples if s.dead_tuples is not None)
    run_.notes["peak_size"] = peak_size
    run_.notes["peak_dead"] = peak_dead
    size_limit = max(run_.notes["pre_pin_max_size"] * 1.25, 1)
    dead_limit = max(run_.notes["pre_pin_max_dead"] * 2, 500)

    def recovered() -> bool:
        latest = [s for s in run_.sampler.snapshot() if s.size is not None][-1]
        return latest.size <= size_limit and latest.dead_tuples <= dead_limit

    def trajectory() -> list[tuple[float, int | None, int | None]]:
        return [
            (round(s.at, 1), s.size, s.dead_tuples)
            for s in run_.sampler.snapshot()
            if s.size is not None
        ]

    run_.wait_until(
        recovered,
        120,
        "dead tuples and size recovering after the pin",
        lambda: (
            f"(limits: size {size_limit}, dead {dead_limit}; seconds, size, dead: {trajectory()})"
        ),
    )
    run_.notes["size_and_dead_recovered_s"] = round(run_.now() - run_.fault_end, 2)


def test_pinned_mvcc_horizon(chaos_cluster, report):
    # The pre-fault load lasts a whole turn of the queue ring (16 slots, one
    # every 0.5 s): the size before the pin is the ring's steady size.
    scenario = Scenario(
        "pinned-horizon", pin_horizon, crash=False, after=horizon_recovered, pre_fault=10.0
    )
    result = run(chaos_cluster, report, scenario)
    # Dead tuples piled up while the horizon was pinned (the pin bit).
    assert result.notes["peak_dead"] > result.notes["pre_pin_max_dead"], result.notes


# --- overload ---------------------------------------------------------------------------


def overload_rate(run_: ChaosRun, t: float) -> float:
    """1.5x the measured drain rate during the fault, half of it otherwise."""
    capacity = run_.capacity or chaos.RATE
    overloaded = run_.fault_start is not None and run_.fault_end is None
    return capacity * (1.5 if overloaded else 0.5)


def overload(run_: ChaosRun) -> None:
    run_.fault_started()
    time.sleep(chaos.fault_seconds())
    run_.fault_ended()
    samples = run_.sampler.snapshot()
    run_.notes["peak_backlog"] = max(s.offered - s.completed for s in samples)


def test_sustained_overload_then_recovery(chaos_cluster, report):
    scenario = Scenario("overload-1.5x", overload, False, recovery="backlog", rate=overload_rate)
    result = run(chaos_cluster, report, scenario)
    # The overload built a backlog of several seconds of work.
    assert result.notes["peak_backlog"] > result.notes["capacity_jobs_per_s"], result.notes


# --- the leader's host vanishing -------------------------------------------------------------


def stop_leader(run_: ChaosRun) -> None:
    """SIGSTOP the leading process: its sessions stay open but say nothing."""
    leader = run_.by_pid(run_.leader_pid())
    assert leader is not None, "no leader among the workers"
    run_.notes["stopped_pid"] = leader.pid
    run_.notes["aimed"] = run_.when_busy(leader)
    run_.fault_started()
    os.kill(leader.pid, signal.SIGSTOP)
    try:
        others = {w.pid for w in run_.workers} - {leader.pid}
        run_.wait_until(lambda: run_.leader_pid() in others, 4 * chaos.STALENESS, "a new leader")
        run_.notes["takeover_s"] = round(run_.now() - run_.fault_start, 2)
        # Long enough that the stopped process's attempts are rescued (in soak
        # mode longer than its runtime row is kept: it must register again).
        stopped_for = max(chaos.STALENESS + 3, chaos.fault_seconds())
        time.sleep(max(stopped_for - (run_.now() - run_.fault_start), 0))
    finally:
        os.kill(leader.pid, signal.SIGCONT)
        run_.fault_ended()
    # Continued, the old leader finds its session gone and steps down.
    run_.wait_until(
        lambda: "is no longer the maintenance leader" in leader.output(),
        30,
        "the stopped leader stepping down",
    )


def test_leader_host_vanishes(chaos_cluster, report):
    result = run(chaos_cluster, report, Scenario("sigstop-leader", stop_leader, crash=True))
    assert result.notes["takeover_s"] < chaos.STALENESS, result.notes
