"""URLs of awa_django: ``path("awa/", include("awa_django.urls"))``.

Names live in the ``awa`` namespace:

* ``awa:callback`` -- ``callbacks/<uuid:callback_id>/<action>``, ``action``
  one of ``complete``, ``fail``, ``retry``, ``resume`` (POST);
* ``awa:healthz`` -- ``healthz`` (GET, HEAD): the awa database answers;
* ``awa:readyz`` -- ``readyz`` (GET, HEAD): it answers and has the substrate.

Extra kwargs of the ``include`` reach the views: ``{"database": "queue"}``
points them at another alias than ``AWA["DATABASE"]``.
"""

from __future__ import annotations

from django.urls import path

from .views import callbacks, health

app_name = "awa"

urlpatterns = [
    path("callbacks/<uuid:callback_id>/<str:action>", callbacks.callback, name="callback"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
]
