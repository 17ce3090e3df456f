"""Shared fixtures: unique queue names, raw connections, subprocess helpers.

The suite runs against a real PostgreSQL: the database of ``DATABASE_URL``
hosts a fresh test database per run (named in testproject/settings.py), built
by the migrations.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from awa_django.storage import substrate
from awa_django.storage.connection import conninfo

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def queue() -> str:
    """A queue name no other test uses, so tests never see each other's jobs."""
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def raw_conn(db):
    """An autocommit psycopg connection to the test database, outside Django."""
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def reset_awa(transactional_db):
    """For transaction=True tests: leave empty queue storage behind."""
    yield
    substrate.reset_data()


def database_url() -> str:
    """URL of the test database, for worker and manage.py subprocesses."""
    settings = connection.settings_dict
    host = settings.get("HOST") or ""
    query = ""
    socket = (settings.get("OPTIONS") or {}).get("host")
    if not host and socket:
        query = f"?host={socket}"
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    user = settings.get("USER") or "postgres"
    return f"postgres://{user}{password}@{host}{port}/{settings['NAME']}{query}"


def manage(
    *args: str,
    database_url_override: str | None = None,
    timeout: float = 120,
    extra_env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run ``testproject/manage.py`` in a subprocess against the test database."""
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url_override or database_url()
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, str(ROOT / "testproject" / "manage.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
