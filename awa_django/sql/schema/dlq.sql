-- Dead-letter queue.
--
-- dlq_entries is a hold table (deleting rows is its normal life, as for
-- deferred_jobs), so retry and purge are one DELETE ... RETURNING each.  A
-- retry moves the row into deferred_jobs, due now, keeping the job id and
-- resetting attempt and run_lease; promotion places it in its lane.  The
-- bulk forms take a bounded batch by filter with SKIP LOCKED, so two
-- operators (or an operator and retention cleanup) never wait for each
-- other and the caller loops batch by batch.
--
-- awa.move_failed_to_dlq moves a failed job's terminal row to the DLQ: the
-- row is superseded (awa.supersede_terminal, as awa.retry_job does) and its
-- snapshot written to dlq_entries.

-- Move DLQ rows back into the queue, due now; p_queue / p_priority (NULL:
-- unchanged) send them elsewhere.  Returns the ids moved.
CREATE OR REPLACE FUNCTION awa.dlq_retry(p_job_ids bigint[], p_queue text, p_priority smallint)
RETURNS SETOF bigint
LANGUAGE sql AS $$
    WITH moved AS (
        DELETE FROM awa.dlq_entries q WHERE q.job_id = ANY (p_job_ids) RETURNING q.*
    )
    INSERT INTO awa.deferred_jobs (job_id, state, queue, priority, kind, args, kwargs, metadata,
                                   tags, attempt, max_attempts, run_lease, ordering_key, errors,
                                   progress, created_at, run_at, attempted_at)
    SELECT m.job_id, 'retryable', COALESCE(p_queue, m.queue), COALESCE(p_priority, m.priority),
           m.kind, m.args, m.kwargs, m.metadata, m.tags, 0, m.max_attempts, 0, m.ordering_key,
           m.errors, m.progress, m.created_at, clock_timestamp(), m.attempted_at
      FROM moved m
    RETURNING job_id
$$;

CREATE OR REPLACE FUNCTION awa.dlq_purge(p_job_ids bigint[]) RETURNS SETOF bigint
LANGUAGE sql AS $$
    DELETE FROM awa.dlq_entries q WHERE q.job_id = ANY (p_job_ids) RETURNING q.job_id
$$;

-- Up to p_limit DLQ ids matching every given filter (NULL: any), oldest
-- move first, skipping rows another transaction holds.
CREATE OR REPLACE FUNCTION awa.dlq_select(
    p_queue text, p_kind text, p_moved_before timestamptz, p_limit integer)
RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT COALESCE(array_agg(s.job_id), '{}')
      FROM (SELECT q.job_id FROM awa.dlq_entries q
             WHERE (p_queue IS NULL OR q.queue = p_queue)
               AND (p_kind IS NULL OR q.kind = p_kind)
               AND (p_moved_before IS NULL OR q.moved_at < p_moved_before)
             ORDER BY q.moved_at, q.job_id
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED) s
$$;

-- Move a failed job to the DLQ.  Returns 'moved', 'already_<state>' for a
-- job that is not failed (nothing changes), or NULL for an unknown id.
CREATE OR REPLACE FUNCTION awa.move_failed_to_dlq(p_job_id bigint, p_reason text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_done awa.terminal_jobs := awa.supersede_terminal(p_job_id, ARRAY['failed'], p_reason);
BEGIN
    IF v_done.id IS NULL THEN
        RETURN awa.already_state(p_job_id);
    END IF;
    INSERT INTO awa.dlq_entries (job_id, queue, priority, kind, args, kwargs, metadata, tags,
                                 attempt, max_attempts, run_lease, ordering_key, errors,
                                 progress, reason, created_at, run_at, attempted_at)
    VALUES (p_job_id, v_done.queue, v_done.priority, v_done.kind, v_done.args, v_done.kwargs,
            v_done.metadata, v_done.tags, v_done.attempt, v_done.max_attempts,
            v_done.run_lease, awa.job_ordering_key(p_job_id), v_done.errors, v_done.progress,
            p_reason, v_done.created_at, v_done.run_at, v_done.attempted_at);
    RETURN 'moved';
END
$$;
