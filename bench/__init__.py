"""The repository's benchmarks: the peer comparison (``run.sh``, ``compare/``),
the standalone scripts, and ``stages``, the ``awa_bench`` stages that are not
part of the package."""
