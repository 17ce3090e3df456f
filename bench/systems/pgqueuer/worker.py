"""Run the PgQueuer worker as `pgq run` does, through `pgqueuer.run()`.

`pgq run` itself fails at start-up with typer 0.29 ("'str' object has no
attribute 'name'" while setting up its logger), so the bench calls the same
supervisor function the CLI wraps, on uvloop like the CLI.

    python worker.py {drain|continuous} BATCH_SIZE
"""

import sys

import pgqueuer
import uvloop
from pgqueuer.domain.types import QueueExecutionMode

if __name__ == "__main__":
    mode, batch_size = QueueExecutionMode[sys.argv[1]], int(sys.argv[2])
    uvloop.run(pgqueuer.run("bench_pgq:create", batch_size=batch_size, mode=mode))
