"""Running claimed attempts: claim a batch, pace it, run each handler, close it.

The dispatcher claims under the queue's permits and rate limit (``permits``,
``pacing``, ``overrides``), the executor runs each handler on the loop or on
a handler thread (``executor``, ``threads``, ``handlers``, ``eager``), and
``attempt`` decides what each result becomes (a closure, a park, a
cancel: one state machine, which ``awa_django.testing.drain`` drives too),
and ``closing`` accounts for each end and hands the closures to the
completer -- or the handler's own transaction wrote it (``atomic``).  Everything one attempt goes
through, from claim to closure, is here.
"""
