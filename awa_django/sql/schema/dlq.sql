-- Dead-letter queue.
--
-- dlq_entries is a hold table (deleting rows is its normal life, as for
-- deferred_jobs), so retry and purge are one DELETE ... RETURNING each.  A
-- retry keeps the job id and resets attempt and run_lease.  Due now, it is
-- placed in its lane at once (awa.place_deferred, as promotion places a due
-- deferred row, which notifies the queue's channel): it is available as the
-- retry commits, with no wait for the leader's promotion tick.  With a later
-- run_at it goes to deferred_jobs as scheduled, and promotion places it.  The
-- bulk forms take a bounded batch by filter with SKIP LOCKED, so two
-- operators (or an operator and retention cleanup) never wait for each
-- other and the caller loops batch by batch.
--
-- awa.move_failed_to_dlq moves a failed job's terminal row to the DLQ: the
-- row is superseded (awa.supersede_terminal, as awa.retry_job does) and its
-- snapshot written to dlq_entries.

-- Move DLQ rows back into the queue: ready now when p_run_at is NULL or not
-- in the future, else scheduled for p_run_at; p_queue / p_priority (NULL:
-- unchanged) send them elsewhere.  Returns the ids moved.  The rows are
-- built field by field, so the deferred_jobs column order does not matter.
CREATE OR REPLACE FUNCTION awa.dlq_retry_at(
    p_job_ids bigint[], p_queue text, p_priority smallint, p_run_at timestamptz)
RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_later constant boolean := p_run_at IS NOT NULL AND p_run_at > clock_timestamp();
    v_entry awa.dlq_entries;
    v_row   awa.deferred_jobs;
    v_rows  awa.deferred_jobs[] := '{}';
BEGIN
    FOR v_entry IN
        WITH moved AS (
            DELETE FROM awa.dlq_entries q WHERE q.job_id = ANY (p_job_ids) RETURNING q.*
        )
        SELECT * FROM moved ORDER BY moved.job_id
    LOOP
        v_row.job_id := v_entry.job_id;
        v_row.state := 'scheduled';  -- kept only when it waits for p_run_at
        v_row.queue := COALESCE(p_queue, v_entry.queue);
        v_row.priority := COALESCE(p_priority, v_entry.priority);
        v_row.kind := v_entry.kind;
        v_row.args := v_entry.args;
        v_row.kwargs := v_entry.kwargs;
        v_row.metadata := v_entry.metadata;
        v_row.tags := v_entry.tags;
        v_row.attempt := 0;
        v_row.max_attempts := v_entry.max_attempts;
        v_row.run_lease := 0;
        v_row.ordering_key := v_entry.ordering_key;
        v_row.errors := v_entry.errors;
        v_row.progress := v_entry.progress;
        v_row.created_at := v_entry.created_at;
        v_row.run_at := COALESCE(p_run_at, clock_timestamp());
        v_row.attempted_at := v_entry.attempted_at;
        v_rows := v_rows || v_row;
    END LOOP;
    IF cardinality(v_rows) = 0 THEN
        RETURN;
    ELSIF v_later THEN
        INSERT INTO awa.deferred_jobs SELECT * FROM unnest(v_rows);
    ELSE
        PERFORM awa.place_deferred(v_rows);
    END IF;
    RETURN QUERY SELECT r.job_id FROM unnest(v_rows) AS r;
END
$$;

-- Move DLQ rows back into the queue, ready now; p_queue / p_priority (NULL:
-- unchanged) send them elsewhere.  Returns the ids moved.  (Before substrate
-- 2 the rows waited in deferred_jobs for the promotion tick.)
CREATE OR REPLACE FUNCTION awa.dlq_retry(p_job_ids bigint[], p_queue text, p_priority smallint)
RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT awa.dlq_retry_at(p_job_ids, p_queue, p_priority, NULL)
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
