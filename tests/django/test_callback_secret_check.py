"""System check W005: the callback receiver is routed and nothing verifies its requests."""

from __future__ import annotations

import io

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from awa_django.checks import check_callback_secret

# A URLconf without the receiver (this module: ROOT_URLCONF=__name__).
urlpatterns: list[object] = []


def awa(**keys):
    return override_settings(AWA={**settings.AWA, **keys}, SILENCED_SYSTEM_CHECKS=[])


def test_a_routed_receiver_without_a_secret_warns():
    with awa():
        (message,) = check_callback_secret()
        assert message.id == "awa_django.W005" and not message.is_serious()
        assert "/awa/callbacks/" in message.msg and "CALLBACK_HMAC_SECRET" in message.msg
        stderr = io.StringIO()
        call_command("check", stderr=stderr)
        assert "awa_django.W005" in stderr.getvalue()
        with pytest.raises(SystemCheckError, match=r"awa_django\.W005"):
            call_command("check", fail_level="WARNING")


@pytest.mark.parametrize("secret", ["s3cret", b"\xff\x00", ["new", b"old"]])
def test_a_secret_silences_it(secret):
    with awa(CALLBACK_HMAC_SECRET=secret):
        assert check_callback_secret() == []
        call_command("check", fail_level="WARNING", stderr=io.StringIO())


def test_without_the_receiver_in_the_urlconf_nothing_warns():
    with awa(), override_settings(ROOT_URLCONF=__name__):
        assert check_callback_secret() == []


def test_settings_without_a_urlconf_route_nothing():
    """A settings module for workers only (no ROOT_URLCONF at all) passes the
    checks instead of failing them with an AttributeError."""
    with awa(), override_settings():
        del settings.ROOT_URLCONF
        assert check_callback_secret() == []
        call_command("check", fail_level="WARNING", stderr=io.StringIO())


def test_invalid_settings_are_left_to_the_settings_check():
    with awa(CALLBACK_HMAC_SECRET=""):
        assert check_callback_secret() == []
