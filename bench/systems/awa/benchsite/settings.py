"""Settings of the benchmark's awa_django project (DATABASE_URL via django-environ)."""

import environ

env = environ.Env()

SECRET_KEY = "awa-bench-not-secret"  # noqa: S105 - a local benchmark project
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["awa_django", "benchapp"]
DATABASES = {"default": env.db_url("DATABASE_URL")}
# Persistent connections, the same for every Django-based system in the bench.
DATABASES["default"]["CONN_MAX_AGE"] = 600
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AWA = {"QUEUES": {"bench": {"max_workers": 512, "claim_batch_size": 512}}}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"awa_django": {"handlers": ["console"], "level": "WARNING"}},
}
