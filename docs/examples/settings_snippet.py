"""The tutorial's settings (checked by tests/django/test_docs_examples.py)."""

# [settings]
INSTALLED_APPS = [
    # ... django.contrib apps and your own ...
    "awa_django",
]

AWA = {
    "QUEUES": {
        "default": {"max_workers": 10},
        "email": {"max_workers": 20, "rate_limit": (50.0, 50)},
    },
}
# [/settings]
