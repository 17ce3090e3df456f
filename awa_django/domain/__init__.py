"""Pure domain rules: job options, payload checks, routing (partitions and
stripes), capacity arithmetic, closures, backoff, queue overrides, unique
keys, dependencies, concurrency keys, descriptors, the clock, text cleaning
for PostgreSQL and the records that cross layers.

Nothing here runs SQL, touches the ORM or needs an event loop, so every
layer above (storage, runtime, ops, the Django surfaces) can use these
rules, and they can be tested without a database.  The import-linter
contracts in ``pyproject.toml`` hold the package to that.
"""
