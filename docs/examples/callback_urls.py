"""The URLconf of the callbacks how-to (the test suite mounts it)."""

from __future__ import annotations

# [urls]
from django.urls import include, path

urlpatterns = [
    # ... your other URLs ...
    path("awa/", include("awa_django.urls")),
]
# [/urls]
