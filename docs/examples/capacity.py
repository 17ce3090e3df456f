"""Capacity settings (the capacity how-to; validated by the test suite)."""

from __future__ import annotations

# [weighted]
WEIGHTED = {
    "GLOBAL_MAX_WORKERS": 20,
    "QUEUES": {
        "email": {"min_workers": 5, "weight": 2},
        "reports": {"min_workers": 2, "weight": 1, "max_workers": 10},
    },
}
# [/weighted]

# [claimers]
CLAIMERS = {"QUEUES": {"events": {"max_workers": 256, "claimers": 2}}}
# [/claimers]

# [fleet]
FLEET = {
    "QUEUES": {
        "crm": {"max_workers": 10, "rate_limit": (50.0, 10), "rate_limit_scope": "fleet"},
    },
}
# [/fleet]
