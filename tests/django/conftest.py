"""Logged-in clients for the console's tests."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client


def console_user(name: str, *perms: str, staff: bool = True) -> Client:
    """A client logged in as a new user holding these awa_django permissions."""
    account = User.objects.create_user(name, password="pw", is_staff=staff)
    for codename in perms:
        account.user_permissions.add(
            Permission.objects.get(content_type__app_label="awa_django", codename=codename)
        )
    client = Client()
    client.force_login(account)
    return client


@pytest.fixture
def superuser() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.fixture
def project_job_admin():
    """The console how-to's own jobs page (``docs/examples/console_actions.py``)
    registered in place of awa's, with the URLs rebuilt, and awa's put back after."""
    import importlib

    from django.conf import settings
    from django.contrib import admin
    from django.urls import clear_url_caches

    from awa_django.models import Job
    from docs.examples import console_actions

    def rebuild_urls() -> None:
        importlib.reload(importlib.import_module(settings.ROOT_URLCONF))
        clear_url_caches()

    original = admin.site._registry[Job]
    console_actions.register(admin.site)
    rebuild_urls()
    try:
        yield admin.site._registry[Job]
    finally:
        admin.site._registry[Job] = original
        rebuild_urls()
