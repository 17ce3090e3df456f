"""What a result was measured with: package versions, the checkout, the machine.

Recorded in results.json beside the numbers, so a result can be compared
with another only when both ran the same versions on a similar machine.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path

from .peers import BENCH, VENVS

# Packages whose versions are recorded for each system's virtualenv.
TRACKED = {
    "awa-django",
    "django",
    "django-environ",
    "psycopg",
    "psycopg-binary",
    "psycopg-pool",
    "procrastinate",
    "pgqueuer",
    "asyncpg",
    "uvloop",
    "django-tasks",
    "django-tasks-db",
    "django-ox",
    "celery",
    "kombu",
    "redis",
    "matplotlib",
}


def venv_versions(venv: str) -> dict:
    python = VENVS / venv / "bin" / "python"
    if not python.exists():
        return {}
    try:
        version = subprocess.run(  # noqa: S603
            [str(python), "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        listed = json.loads(
            subprocess.run(  # noqa: S603
                [str(python), "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
        )
    except (subprocess.SubprocessError, ValueError) as exc:
        return {"error": str(exc)}
    packages = {p["name"].lower(): p["version"] for p in listed if p["name"].lower() in TRACKED}
    return {"python": version, "packages": packages}


def repo_info() -> dict:
    """The awa_django checkout being measured: commit and uncommitted changes."""

    def git(*argv: str) -> str:
        done = subprocess.run(  # noqa: S603
            ["git", *argv],  # noqa: S607
            cwd=BENCH.parent,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return done.stdout.strip()

    try:
        return {
            "commit": git("rev-parse", "HEAD"),
            "awa_django_uncommitted_changes": bool(git("status", "--porcelain", "awa_django")),
        }
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": str(exc)}


def machine_info() -> dict:
    mem = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = line.split(":", 1)[1].strip()
    except OSError:
        pass
    nproc = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()  # noqa: S607
    return {
        "nproc": int(nproc) if nproc.isdigit() else os.cpu_count(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "processor": platform.machine(),
        "memory": mem,
        "driver_python": platform.python_version(),
    }
