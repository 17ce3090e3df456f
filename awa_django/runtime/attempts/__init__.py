"""Running claimed attempts: claim a batch, pace it, run each handler, close it.

The dispatcher claims under the queue's permits and rate limit (``permits``,
``pacing``, ``overrides``), the executor runs each handler on the loop or on
a handler thread (``executor``, ``threads``, ``handlers``, ``eager``), and
``closing`` turns each result into a closure, written in the handler's own
transaction when it asked for one (``atomic``).  Everything one attempt goes
through, from claim to closure, is here.
"""
