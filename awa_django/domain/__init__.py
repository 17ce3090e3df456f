"""Pure domain rules: job options, routing, capacity arithmetic, closures,
backoff and queue overrides.

Nothing here runs SQL, touches the ORM or needs an event loop, so every
layer above (storage, runtime, ops, the Django surfaces) can use these
rules, and they can be tested without a database.  The import-linter
contracts in ``pyproject.toml`` hold the package to that.
"""
