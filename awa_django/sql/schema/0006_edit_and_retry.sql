-- Edit and retry: run a failed, cancelled or dead-lettered job again with
-- corrected arguments.
--
-- The job keeps its id, queue, priority, metadata, tags and error history,
-- and is revived the way its state is revived without an edit: a failed or
-- cancelled job's terminal row is superseded (awa.supersede_terminal, as
-- awa.retry_job does; the append-only row itself is never rewritten, so the
-- history ring still holds the old arguments), a dead letter leaves
-- dlq_entries (as awa.dlq_retry_at does).  Unlike awa.retry_job, whose row
-- waits in deferred_jobs for the promotion tick, the edited job is placed in
-- its lane at once (awa.place_deferred, which notifies the queue's channel):
-- the operator who just fixed it sees it available, and an idle worker wakes.
--
-- The edit is noted in the job's error history (type awa_django.edited, as a
-- cancellation notes awa_django.cancelled), with the old arguments when
-- their JSON is short, so the job's own page shows that it ran with other
-- arguments before; the audit log (awa.audit_log) keeps the full old and new
-- arguments when the caller names an actor.
--
-- Validation (the kind's signature, JSON, AWA["MAX_PAYLOAD_BYTES"]) is the
-- caller's: this function only stores what it is given.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
-- Substrate 6: edit and retry.
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 6);

-- Revive job p_job_id with p_args / p_kwargs (NULL: keep the current ones),
-- ready now.  outcome is 'retried' (old_args / old_kwargs: what the job had),
-- 'already_<state>' for a job in another state (nothing changes), or NULL
-- for an unknown id.  p_note heads the error-history entry of the edit.
CREATE OR REPLACE FUNCTION awa.edit_and_retry(
    p_job_id bigint, p_args json, p_kwargs json, p_note text,
    OUT outcome text, OUT old_args json, OUT old_kwargs json)
LANGUAGE plpgsql AS $$
DECLARE
    v_entry awa.dlq_entries;
    v_done  awa.terminal_jobs;
    v_row   awa.deferred_jobs;
    v_shown text;
BEGIN
    DELETE FROM awa.dlq_entries q WHERE q.job_id = p_job_id RETURNING q.* INTO v_entry;
    IF v_entry.job_id IS NOT NULL THEN
        -- A dead letter: attempt and run_lease start again (awa.dlq_retry_at).
        v_row.queue := v_entry.queue;
        v_row.priority := v_entry.priority;
        v_row.kind := v_entry.kind;
        v_row.args := v_entry.args;
        v_row.kwargs := v_entry.kwargs;
        v_row.metadata := v_entry.metadata;
        v_row.tags := v_entry.tags;
        v_row.attempt := v_entry.attempt;
        v_row.max_attempts := v_entry.max_attempts;
        v_row.run_lease := 0;
        v_row.ordering_key := v_entry.ordering_key;
        v_row.errors := v_entry.errors;
        v_row.progress := v_entry.progress;
        v_row.created_at := v_entry.created_at;
        v_row.attempted_at := v_entry.attempted_at;
    ELSE
        v_done := awa.supersede_terminal(p_job_id, ARRAY['failed', 'cancelled'], p_note);
        IF v_done.id IS NULL THEN
            outcome := awa.already_state(p_job_id);
            RETURN;
        END IF;
        -- A failed or cancelled job: as awa.retry_job builds it.
        v_row.queue := v_done.queue;
        v_row.priority := v_done.priority;
        v_row.kind := v_done.kind;
        v_row.args := v_done.args;
        v_row.kwargs := v_done.kwargs;
        v_row.metadata := v_done.metadata;
        v_row.tags := v_done.tags;
        v_row.attempt := v_done.attempt;
        v_row.max_attempts := v_done.max_attempts;
        v_row.run_lease := v_done.run_lease;
        v_row.ordering_key := awa.job_ordering_key(p_job_id);
        v_row.errors := v_done.errors;
        v_row.progress := v_done.progress;
        v_row.created_at := v_done.created_at;
        v_row.attempted_at := v_done.attempted_at;
    END IF;

    outcome := 'retried';
    old_args := v_row.args;
    old_kwargs := v_row.kwargs;
    v_shown := '';
    IF octet_length(old_args::text) + octet_length(old_kwargs::text) <= 1024 THEN
        v_shown := format(' Before: args %s, kwargs %s.', old_args::text, old_kwargs::text);
    END IF;
    v_row.errors := awa.error_entry(v_row.errors, v_row.attempt, 'awa_django.edited',
                                    p_note || v_shown)::jsonb;
    v_row.job_id := p_job_id;
    v_row.state := 'retryable';
    v_row.args := COALESCE(p_args, v_row.args);
    v_row.kwargs := COALESCE(p_kwargs, v_row.kwargs);
    v_row.attempt := 0;
    v_row.run_at := clock_timestamp();
    PERFORM awa.place_deferred(ARRAY[v_row]);
END
$$;
