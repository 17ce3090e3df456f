"""Worker start-up names every setting that is accepted but has no effect yet."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_worker_warns_about_settings_that_do_nothing_yet(queue, start_worker, reset_awa):
    env = {"AWA_SETTINGS_JSON": json.dumps({"TERMINAL_COUNT_ROLLUP_INTERVAL": 5})}
    worker = start_worker("--queue", queue, "--burst", "--no-maintenance", env=env)
    assert worker.wait(timeout=60) == 0
    assert "AWA[TERMINAL_COUNT_ROLLUP_INTERVAL]" in worker.output()
    assert "no effect yet" in worker.output()


def test_worker_with_default_settings_warns_about_nothing(queue, start_worker, reset_awa):
    worker = start_worker("--queue", queue, "--burst", "--no-maintenance")
    assert worker.wait(timeout=60) == 0
    assert "no effect yet" not in worker.output()
