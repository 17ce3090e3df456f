"""Settings of the benchmark's django-ox project (DATABASE_URL via django-environ)."""

import environ

env = environ.Env()

SECRET_KEY = "django-ox-bench-not-secret"  # noqa: S105 - a local benchmark project
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django_ox", "benchapp"]
DATABASES = {"default": env.db_url("DATABASE_URL")}
# Persistent connections, the same for every Django-based system in the bench.
DATABASES["default"]["CONN_MAX_AGE"] = 600
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Django 5.2 runs the Tasks framework through the django-tasks backport.
TASKS = {"default": {"BACKEND": "django_ox.backend.OxBackend", "QUEUES": ["bench"]}}
