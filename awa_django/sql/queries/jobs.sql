-- Read statements over the awa.jobs view.  JSON columns are returned as text
-- and decoded in Python so every driver configuration yields the same values.

-- name: get_job
SELECT id, kind, queue, priority, state, attempt, max_attempts, run_lease,
       args::text, kwargs::text, metadata::text, tags, errors::text, progress::text,
       return_value::text, created_at, run_at, attempted_at, finalized_at
  FROM awa.job_window(%(id)s, %(id)s)

-- name: list_jobs
SELECT id, kind, queue, priority, state, attempt, max_attempts, run_lease,
       args::text, kwargs::text, metadata::text, tags, errors::text, progress::text,
       return_value::text, created_at, run_at, attempted_at, finalized_at
  FROM awa.jobs
 WHERE (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]))
   AND (%(state)s::text IS NULL OR state = %(state)s::text)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY id
 LIMIT %(limit)s

-- name: queue_counts
-- Each state from its cheapest exact source (schema/console.sql, jobs held
-- for a concurrency slot since v022), summed over the physical queues (the
-- stripes) of one logical queue.
SELECT state, sum(n)::bigint FROM awa.state_counts(%(queues)s::text[]) GROUP BY state

-- name: state_counts
-- (queue, state, count) of every queue with a job in some state.
SELECT queue, state, n FROM awa.state_counts(NULL) WHERE n <> 0

-- name: job_page
-- args / kwargs: JSON text the job's arguments must contain (NULL: any).
SELECT id, kind, queue, priority, state, attempt, max_attempts, run_lease,
       args::text, kwargs::text, metadata::text, tags, errors::text, progress::text,
       return_value::text, created_at, run_at, attempted_at, finalized_at
  FROM awa.job_page_matching(%(before)s, %(floor)s, %(limit)s, %(state)s,
                             %(queues)s::text[], %(kind)s, %(priority)s::smallint, %(tag)s,
                             %(args)s::jsonb, %(kwargs)s::jsonb)

-- name: job_states
SELECT id, state FROM awa.jobs WHERE queue = ANY (%(queues)s::text[]) ORDER BY id

-- name: newest_job_id
SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM awa.job_id_seq
