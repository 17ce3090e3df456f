"""One worker process wired together, its LISTEN connection and its supervisor.

``worker`` builds every service of the other sub-packages from one
``WorkerConfig``, starts them and stops them (the bounded stop and its
hand-back are ``shutdown``); ``notifier`` holds the LISTEN
connection that wakes them; ``supervisor`` spawns and watches the worker
processes of ``--processes N``.  It is the only sub-package that imports all
the others, so start-up order is read in one place.
"""
