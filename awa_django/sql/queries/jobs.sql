-- Read statements over the awa.jobs view.  JSON columns are returned as text
-- and decoded in Python so every driver configuration yields the same values.

-- name: get_job
SELECT id, kind, queue, priority, state, attempt, max_attempts, run_lease,
       args::text, kwargs::text, metadata::text, tags, errors::text, progress::text,
       return_value::text, created_at, run_at, attempted_at, finalized_at
  FROM awa.jobs
 WHERE id = %s

-- name: list_jobs
SELECT id, kind, queue, priority, state, attempt, max_attempts, run_lease,
       args::text, kwargs::text, metadata::text, tags, errors::text, progress::text,
       return_value::text, created_at, run_at, attempted_at, finalized_at
  FROM awa.jobs
 WHERE (%(queue)s::text IS NULL OR queue = %(queue)s::text)
   AND (%(state)s::text IS NULL OR state = %(state)s::text)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY id
 LIMIT %(limit)s

-- name: queue_counts
-- Live rows from the view plus the permanent counts of pruned terminal rows.
SELECT state, sum(n)::bigint
  FROM (SELECT state, count(*) AS n FROM awa.jobs WHERE queue = %(queue)s GROUP BY state
        UNION ALL
        SELECT state, count FROM awa.queue_terminal_rollups WHERE queue = %(queue)s) AS c
 GROUP BY state

-- name: job_states
SELECT id, state FROM awa.jobs WHERE queue = %(queue)s ORDER BY id
