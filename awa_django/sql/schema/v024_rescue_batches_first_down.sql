-- Undo version 24: awa.rescue_attempts goes back to its statement over
-- awa.open_receipts (version 3's).
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

CREATE OR REPLACE FUNCTION awa.rescue_attempts(
    p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[],
    p_dlq_off text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_rescued integer;
BEGIN
    WITH candidates AS (
        SELECT c.claim_slot, c.batch_id, c.item, c.job_id, c.run_lease, c.attempt, c.queue,
               r.max_attempts, r.errors
          FROM awa.open_receipts c
          JOIN awa.ready_entries r
            ON r.ready_slot = c.ready_slot AND r.queue = c.queue AND r.priority = c.priority
           AND r.shard = c.shard AND r.lane_seq = c.lane_seq
         WHERE CASE p_reason
                 WHEN 'deadline_expired' THEN c.deadline_at < clock_timestamp()
                 ELSE NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                   WHERE i.id = c.runtime_id
                                     AND i.heartbeat_at > clock_timestamp() - p_staleness)
               END
         LIMIT p_limit
    ), routed AS (
        SELECT c.*,
               CASE WHEN c.attempt < c.max_attempts THEN 'retryable'
                    WHEN c.queue = ANY (p_dlq_on)
                      OR (p_dlq_default AND NOT c.queue = ANY (p_dlq_off)) THEN 'dlq'
                    ELSE 'failed' END AS target,
               (COALESCE(c.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                   'attempt', c.attempt,
                   'type', 'awa_django.' || p_reason,
                   'message', CASE p_reason
                       WHEN 'deadline_expired' THEN 'attempt passed its deadline'
                       ELSE 'worker stopped heartbeating' END,
                   'traceback', '',
                   'at', clock_timestamp())))::text AS history
          FROM candidates c
    ), ordered AS (
        SELECT * FROM routed ORDER BY batch_id, item
    )
    SELECT count(*) INTO v_rescued
      FROM awa.close_attempts(
          ARRAY(SELECT claim_slot FROM ordered), ARRAY(SELECT batch_id FROM ordered),
          ARRAY(SELECT item FROM ordered), ARRAY(SELECT job_id FROM ordered),
          ARRAY(SELECT run_lease FROM ordered), ARRAY(SELECT target FROM ordered),
          ARRAY(SELECT p_reason FROM ordered), ARRAY(SELECT clock_timestamp() FROM ordered),
          ARRAY(SELECT attempt FROM ordered), ARRAY(SELECT history FROM ordered),
          ARRAY(SELECT NULL::text FROM ordered), ARRAY(SELECT p_reason FROM ordered),
          ARRAY(SELECT NULL::text FROM ordered));
    RETURN v_rescued;
END
$$;

UPDATE awa.substrate_info SET schema_version = LEAST(schema_version, 23);
