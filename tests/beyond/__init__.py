"""Issue 17: atomic handlers, dependencies, per-key concurrency, backpressure."""
