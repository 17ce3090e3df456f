-- Producer statements.  All of them run on the caller's connection and
-- inside the caller's transaction.

-- name: enqueue_job
SELECT job_id, state, run_at
  FROM awa.enqueue_job(%s, %s::smallint, %s, %s::json, %s::json, %s::jsonb, %s::text[],
                       %s::smallint, %s::timestamptz, %s::text)

-- name: enqueue_unique
-- A unique job: takes its key's claim, or returns the holder (existing_id).
SELECT job_id, state, run_at, existing_id
  FROM awa.enqueue_unique(%s, %s::text[], %s, %s::smallint, %s, %s::json, %s::json, %s::jsonb,
                          %s::text[], %s::smallint, %s::timestamptz, %s::text)

-- name: enqueue_dependent
-- A job with dependencies: waits, runs now (all completed), is written
-- cancelled (one failed, policy "cancel"), or -- state 'unknown' -- names
-- the dependencies no job has and writes nothing.
SELECT job_id, state, run_at, missing
  FROM awa.enqueue_dependent(%s, %s::smallint, %s, %s::json, %s::json, %s::jsonb, %s::text[],
                             %s::smallint, %s::timestamptz, %s::text, %s::bigint[], %s)

-- name: reserve_ready_batch
-- Each job's run_at (NULL: now) stamps the segment it lands in, for aging.
SELECT r.ord, r.job_id, r.shard, r.lane_seq, r.ready_slot, r.ready_generation, now()::text
  FROM awa.reserve_ready_batch(%s::text[], %s::smallint[], %s::text[],
                                  %s::timestamptz[]) AS r

-- name: reserve_ready_run
-- One lane for the whole batch (no row: the queue has several enqueue shards).
SELECT r.job_ids, r.shard, r.first_seq, r.ready_slot, r.ready_generation, r.created_at
  FROM awa.reserve_ready_run(%s, %s::smallint, %s) AS r

-- name: reserve_job_ids
SELECT nextval('awa.job_id_seq'), now() FROM generate_series(1, %s)

-- name: copy_ready
COPY awa.ready_entries (ready_slot, ready_generation, queue, priority, shard, lane_seq,
                       job_id, kind, args, kwargs, metadata, tags, max_attempts,
                       ordering_key, created_at, run_at)
FROM STDIN

-- name: copy_ready_run
-- A batch reserved by reserve_ready_run: created_at and run_at take their
-- default, the transaction's now() (the reservation's created_at).
COPY awa.ready_entries (ready_slot, ready_generation, queue, priority, shard, lane_seq,
                       job_id, kind, args, kwargs, metadata, tags, max_attempts,
                       ordering_key)
FROM STDIN

-- name: copy_deferred
COPY awa.deferred_jobs (job_id, state, queue, priority, kind, args, kwargs, metadata, tags,
                       max_attempts, ordering_key, created_at, run_at)
FROM STDIN
