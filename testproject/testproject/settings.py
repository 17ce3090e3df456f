"""Settings of the small project used by the test suite and the demo.

Configured from the environment with django-environ: ``DATABASE_URL`` names
the PostgreSQL database (``scripts/with_database.py`` starts an embedded
one with pgserver when it is unset).
"""

import os
from pathlib import Path
from typing import Any

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent
env = environ.Env(DEBUG=(bool, False))

SECRET_KEY = env("SECRET_KEY", default="awa-django-test-project-not-secret")
DEBUG = env("DEBUG")
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "awa_django",
    "demo",
    "testapp",
]
if django.VERSION < (6, 0):
    # Django's Tasks API comes from the django-tasks backport before Django 6;
    # as an installed app it runs the task backends' system checks.
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
# The test suite posts unsigned callbacks to the receiver this project routes;
# a real site sets AWA["CALLBACK_HMAC_SECRET"] instead of silencing the warning.
SILENCED_SYSTEM_CHECKS = ["awa_django.W005"]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/postgres")
}
# Workers run many jobs per thread: keep connections instead of reconnecting
# per job (close_old_connections still drops broken or aged ones).
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Every test run gets its own database, so runs (and CI legs) never share state.
DATABASES["default"]["TEST"] = {"NAME": env("AWA_TEST_DATABASE", default=f"test_awa_{os.getpid()}")}

# Behind a transaction-mode pooler (PgBouncer), as Django advises for one;
# awa then keeps no session state on this alias (tests/pooler).
DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env.bool("DATABASE_POOLED", default=False)
# A direct connection beside a pooled default: awa's LISTEN and election.
if env("SESSION_DATABASE_URL", default=""):
    DATABASES["session"] = env.db_url("SESSION_DATABASE_URL")
# The queue's own database in outbox mode (tests/outbox: AWA_SETTINGS_JSON
# then names it AWA["DATABASE"] and "default" AWA["OUTBOX_DATABASE"]).
if env("QUEUE_DATABASE_URL", default=""):
    DATABASES["queue"] = env.db_url("QUEUE_DATABASE_URL")

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"

AWA: dict[str, Any] = {
    "QUEUES": {
        "default": {"max_workers": 10},
        "email": {"max_workers": 20, "rate_limit": (50.0, 50), "deadline": 600},
        "reports": {"max_workers": 4},
    },
}
# Django's Tasks API runs on awa (testapp/tasks.py).  No QUEUES list: any
# valid awa queue name is accepted.
TASKS = {"default": {"BACKEND": "awa_django.tasks.AwaBackend", "QUEUES": []}}

if "session" in DATABASES:
    AWA["SESSION_DATABASE"] = "session"

# Keys of the encrypted jobs (testapp.jobs.sealed*).  A real site reads them
# from its secrets store; this one is public and protects nothing.
AWA["ENCRYPTION_KEYS"] = env.list(
    "AWA_ENCRYPTION_KEYS", default=["wsa5bqsJs-GDRR4DqFtDl66sRgE-SBgTTqEcyGXuY0w="]
)

# Tests start worker processes with extra AWA keys (short heartbeats, fast
# ring rotation) through this variable: a JSON object merged into AWA.
AWA.update(env.json("AWA_SETTINGS_JSON", default={}))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "awa_django": {"handlers": ["console"], "level": env("AWA_LOG_LEVEL", default="WARNING")}
    },
}

if django.VERSION >= (6, 1):
    # 6.1's named mail backends (the tests swap each for the in-memory one).
    MAILERS: dict[str, dict[str, object]] = {"default": {}}
