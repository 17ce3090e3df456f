"""The health probes (awa:healthz, awa:readyz) against real databases.

An unreachable database is a second connection alias pointing at a closed
port (127.0.0.1:1); a database without the substrate is one created for the
test.  Both aliases are added to Django's connection handler for the test
only (``settings.DATABASES`` is not touched, so nothing else sees them).
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import Client, override_settings
from django.urls import include, path, reverse
from psycopg import sql

from awa_django.storage import substrate
from awa_django.storage.connection import conninfo
from awa_django.views import health

UNREACHABLE = "awa_unreachable"
BARE = "awa_bare"

# URLconf of test_include_kwargs_choose_the_database: the probes for another alias.
urlpatterns = [
    path("awa/", include("awa_django.urls")),
    path("other/", include("awa_django.urls", namespace="other"), {"database": UNREACHABLE}),
]


@contextlib.contextmanager
def extra_alias(alias: str, **changes) -> Iterator[str]:
    """A connection alias like the default one with ``changes``, for this test only."""
    settings_dict = copy.deepcopy(connections.settings[DEFAULT_DB_ALIAS])
    settings_dict.update(changes)
    connections.settings[alias] = settings_dict
    try:
        yield alias
    finally:
        with contextlib.suppress(AttributeError):
            connections[alias].close()
            del connections[alias]
        del connections.settings[alias]


@pytest.fixture
def outside_test_case(django_db_setup, django_db_blocker) -> Iterator[None]:
    """Database access without a Django test case around the test (read-only tests)."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def unreachable(outside_test_case) -> Iterator[str]:
    options = dict(connections.settings[DEFAULT_DB_ALIAS].get("OPTIONS") or {})
    options.pop("host", None)  # a unix socket would win over HOST
    options["connect_timeout"] = 5
    with extra_alias(UNREACHABLE, HOST="127.0.0.1", PORT="1", OPTIONS=options) as alias:
        yield alias


@pytest.fixture
def bare_database(outside_test_case) -> Iterator[str]:
    """An empty database on the test server: it answers, but has no awa schema."""
    name = f"test_awa_bare_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(conninfo(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with extra_alias(BARE, NAME=name) as alias:
            yield alias
    finally:
        with psycopg.connect(conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def awa_on(alias: str):
    return override_settings(AWA={**settings.AWA, "DATABASE": alias})


def probe(name: str, method: str = "get"):
    return getattr(Client(), method)(reverse(f"awa:{name}"))


# --- the test database: healthy and ready ---------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["healthz", "readyz"])
def test_the_test_database_is_healthy_and_ready(name):
    response = probe(name)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Content-Type"] == "application/json"
    assert "no-cache" in response["Cache-Control"]  # probes must never be cached


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["healthz", "readyz"])
def test_head_is_answered_without_a_body(name):
    response = probe(name, "head")
    assert response.status_code == 200
    assert response.content == b""


@pytest.mark.parametrize("name", ["healthz", "readyz"])
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_other_methods_are_405_in_json(name, method):
    response = probe(name, method)
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert "not allowed" in response.json()["error"]


def test_the_urls_live_in_the_awa_namespace():
    assert reverse("awa:healthz") == "/awa/healthz"
    assert reverse("awa:readyz") == "/awa/readyz"


def test_each_probe_is_a_list_of_checks():
    assert list(health.LIVENESS_CHECKS) == [health.database_answers]
    assert list(health.READINESS_CHECKS) == [health.database_answers, health.substrate_installed]


# --- an unreachable database: 503 with a general reason, the detail logged -------


def assert_logged(caplog, *fragments: str) -> None:
    logged = [r.getMessage() for r in caplog.records if r.name == "awa_django.health"]
    assert logged and all(f in logged[-1] for f in fragments), logged


@pytest.mark.parametrize("name", ["healthz", "readyz"])
def test_an_unreachable_database_is_503(name, unreachable, caplog):
    with awa_on(unreachable):
        response = probe(name)
    assert response.status_code == 503
    body = response.json()
    assert body == {"status": "unavailable", "reason": "the database does not answer"}
    assert_logged(caplog, f"/awa/{name} answered 503: OperationalError: ", "port 1")
    # The default database is not affected.
    assert probe(name).status_code == 200


@pytest.mark.parametrize("name", ["healthz", "readyz"])
def test_a_503_names_no_host_port_or_role(name, unreachable, caplog):
    """Issue 30 point 7: the unauthenticated body carried the driver's error."""
    connection = connections.settings[unreachable]
    user = connection.get("USER") or "postgres"
    with awa_on(unreachable):
        response = probe(name)
    assert response.status_code == 503
    text = response.content.decode()
    for secret in ("127.0.0.1", '"port', "port 1", user, connection["NAME"]):
        assert secret not in text, (secret, text)
    assert_logged(caplog, "127.0.0.1")


def test_include_kwargs_choose_the_database(unreachable, settings):
    settings.ROOT_URLCONF = __name__
    client = Client()
    assert client.get("/awa/healthz").status_code == 200
    response = client.get(reverse("other:healthz"))
    assert reverse("other:healthz") == "/other/healthz"
    assert response.status_code == 503
    assert response.json()["reason"] == "the database does not answer"


@pytest.mark.django_db
def test_an_alias_missing_from_databases_is_503(caplog):
    with awa_on("no_such_alias"):
        response = probe("healthz")
    assert response.status_code == 503
    assert response.json()["reason"] == health.PUBLIC_REASONS[None]
    assert_logged(
        caplog,
        "ImproperlyConfigured: awa_django: database alias 'no_such_alias' is not in "
        "settings.DATABASES",
    )
    assert health.failed_check(health.LIVENESS_CHECKS, "no_such_alias").startswith(
        "ImproperlyConfigured: awa_django: database alias 'no_such_alias'"
    )


# --- a database without the substrate, or with an older one ---------------------


def test_a_database_without_the_substrate_is_healthy_but_not_ready(bare_database, caplog):
    with awa_on(bare_database):
        assert probe("healthz").status_code == 200
        response = probe("readyz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "reason": "the awa substrate is not installed or is older than this code needs",
    }
    assert_logged(caplog, f"the awa substrate is not installed in database {bare_database!r}")


@pytest.mark.django_db
def test_an_older_substrate_is_not_ready(monkeypatch, caplog):
    installed = substrate.SCHEMA_VERSION
    # The code expects the next version (as after an upgrade whose migrate has
    # not run yet); the database is real and unchanged.
    monkeypatch.setattr(substrate, "SCHEMA_VERSION", installed + 1)
    assert probe("healthz").status_code == 200
    response = probe("readyz")
    assert response.status_code == 503
    assert response.json()["reason"] == health.PUBLIC_REASONS[health.substrate_installed]
    assert_logged(
        caplog,
        f"the awa substrate in database 'default' is version {installed}; "
        f"this code needs {installed + 1} (run manage.py migrate awa_django)",
    )


@pytest.mark.django_db
def test_a_newer_substrate_is_ready(monkeypatch):
    # During a rolling deploy the previous release runs against the new schema.
    monkeypatch.setattr(substrate, "SCHEMA_VERSION", substrate.SCHEMA_VERSION - 1)
    assert probe("readyz").status_code == 200


def test_the_probes_work_under_atomic_requests(bare_database):
    """With ATOMIC_REQUESTS the probe runs inside the request's transaction (savepoints)."""
    name = connections.settings[bare_database]["NAME"]
    with extra_alias("awa_bare_atomic", NAME=name, ATOMIC_REQUESTS=True) as alias, awa_on(alias):
        assert probe("healthz").status_code == 200
        response = probe("readyz")
    assert response.status_code == 503
    assert "not installed" in response.json()["reason"]
