"""Django app configuration: registers checks and imports ``jobs`` modules."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class AwaDjangoConfig(AppConfig):
    name = "awa_django"
    label = "awa_django"
    verbose_name = "Awa background jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .jobs import registry
        from .observability.install import install

        # Log lines, signals (sent by the job definition) and, with the otel
        # extra, telemetry.
        install(definition=registry.get)

        # Every installed app's ``jobs`` module registers its @job kinds, so
        # workers know every kind without extra configuration.
        autodiscover_modules("jobs")
