"""Running one system's adapter commands and workers, and never leaving one behind.

Every process the driver starts is registered in ``LIVE`` so that a failed
step, a timeout or Ctrl-C stops all of them (``stop_all``) before the next
system runs on the same machine: a stray worker would skew its numbers.
Adapters report through one stdout line that starts with ``RESULT_PREFIX``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path

from .peers import SYSTEMS_DIR, VENVS, WORK, StepError, System

RESULT_PREFIX = "BENCH_RESULT "


LIVE: dict[int, subprocess.Popen] = {}  # worker/producer processes this driver started


def stop_process(proc: subprocess.Popen, timeout: float) -> int | None:
    """SIGTERM the process (as an operator would), then SIGKILL its group after ``timeout``."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
    else:  # the leader exited; make sure no child of its group is left behind
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    LIVE.pop(proc.pid, None)
    return proc.returncode


def stop_all() -> None:
    for proc in list(LIVE.values()):
        stop_process(proc, 10)


class Runner:
    """Runs one system's adapter commands and worker under its virtualenv."""

    def __init__(self, system: System, database_url: str | None, args) -> None:
        self.system = system
        self.python = VENVS / system.venv / "bin" / "python"
        self.adapter = SYSTEMS_DIR / system.adapter / "adapter.py"
        self.dir = WORK / system.key
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE", "PYTHONHOME"}
        }
        self.env.update(system.env)
        self.env["PYTHONUNBUFFERED"] = "1"
        self.env["REDIS_URL"] = args.redis_url
        self.env["BENCH_REDIS_PREFIX"] = f"bench_{system.key}_{secrets.token_hex(4)}:"
        if database_url:
            self.env["DATABASE_URL"] = database_url
        self.log_counter = 0

    def _log(self, name: str) -> Path:
        self.log_counter += 1
        return self.dir / f"{self.log_counter:02d}-{name}.log"

    def run(self, command: str, *options: str, timeout: float, latency_dir: Path | None = None):
        argv = [str(self.python), str(self.adapter), command, *options]
        env = dict(self.env)
        if latency_dir is not None:
            env["BENCH_LATENCY_DIR"] = str(latency_dir)
        log = self._log(command)
        with open(log, "w") as out:
            proc = subprocess.Popen(  # noqa: S603 - our own venv python and adapter
                argv,
                cwd=self.dir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
                start_new_session=True,
            )
            LIVE[proc.pid] = proc
            try:
                stdout, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_process(proc, 5)
                raise StepError(f"`{command}` timed out after {timeout:.0f} s") from None
            LIVE.pop(proc.pid, None)
            out.write(stdout)
        result = None
        for line in stdout.splitlines():
            if line.startswith(RESULT_PREFIX):
                result = json.loads(line[len(RESULT_PREFIX) :])
        if proc.returncode != 0 or result is None:
            raise StepError(f"`{command}` failed (exit {proc.returncode}): {tail(log)}")
        return result

    def start(self, command: str, *options: str, latency_dir: Path | None = None):
        argv = [str(self.python), str(self.adapter), command, *options]
        env = dict(self.env)
        if latency_dir is not None:
            env["BENCH_LATENCY_DIR"] = str(latency_dir)
        log = self._log(command)
        out = open(log, "w")
        proc = subprocess.Popen(  # noqa: S603 - our own venv python and adapter
            argv,
            cwd=self.dir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        proc.log_path = log  # type: ignore[attr-defined]
        LIVE[proc.pid] = proc
        return proc

    def worker(self, *, burst: bool, latency_dir: Path | None = None) -> subprocess.Popen:
        return self.start("worker", *(["--burst"] if burst else []), latency_dir=latency_dir)


def tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])[-1200:]
