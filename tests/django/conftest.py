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
