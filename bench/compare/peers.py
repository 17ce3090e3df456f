"""The peer systems the comparison runs, and where their virtualenvs and adapters live.

Adding a system is one ``System(...)`` entry here plus its adapter under
``bench/systems/<adapter>/`` (bench/README.md); nothing else in the driver
names a system, except the Celery row's Redis version in the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
VENVS = BENCH / ".venvs"
WORK = BENCH / ".work"
SYSTEMS_DIR = BENCH / "systems"


@dataclass
class System:
    key: str  # results id and database name part
    label: str
    venv: str  # bench/.venvs/<venv>
    adapter: str  # bench/systems/<adapter>/adapter.py
    env: dict = field(default_factory=dict)
    postgres: bool = True  # False: the queue lives elsewhere (Postgres columns n/a)
    burst: bool = True  # the worker has a mode that exits once the queue is empty


SYSTEMS = [
    System("awa_async", "awa_django (async)", "awa", "awa", {"BENCH_VARIANT": "async"}),
    System("awa_sync", "awa_django (sync)", "awa", "awa", {"BENCH_VARIANT": "sync"}),
    System("procrastinate", "procrastinate", "procrastinate", "procrastinate"),
    System("pgqueuer", "pgqueuer", "pgqueuer", "pgqueuer"),
    System("django_tasks_db", "django-tasks-db", "django_tasks_db", "django_tasks_db"),
    System("django_ox", "django-ox", "django_ox", "django_ox"),
    System("celery", "celery (Redis)", "celery", "celery", postgres=False, burst=False),
]


class StepError(RuntimeError):
    """A workload step of one system failed; the run goes on with the next system."""
