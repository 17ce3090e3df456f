"""Writing what attempts did, and keeping running attempts theirs.

Closures are batched and written by the completer (``completer``, with the
retry and fallback of a failed flush in ``flush_retry``); while attempts
run, the heartbeat extends their leases, ``leases`` delivers cancels and
callbacks to them, and ``progress`` writes what handlers report.  These
services see running attempts only through ``inflight``, never the
dispatcher, so they sit below ``attempts``.
"""
