-- Undo version 11: drop the lease functions; attempts are open only by their
-- receipt again.  The lease columns, awa.receipt_is_open, the jobs view and
-- the queue-ring gate stay: with no lease rows they read exactly as before.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.retry_job(bigint, text);
DROP FUNCTION IF EXISTS awa.rescue_v2(text, interval, boolean, text[], text[], integer);
DROP FUNCTION IF EXISTS awa.heartbeat_leases(uuid, bigint[], bigint[]);
DROP FUNCTION IF EXISTS awa.cancel_job(bigint, text);
DROP FUNCTION IF EXISTS awa.resolve_callback(uuid, text, text, text, boolean, text[], text[]);
DROP FUNCTION IF EXISTS awa.rescue_leases(text, interval, boolean, text[], text[], integer);
DROP FUNCTION IF EXISTS awa.failure_target(smallint, smallint, text, boolean, text[], text[],
                                           boolean);
DROP FUNCTION IF EXISTS awa.error_entry(jsonb, smallint, text, text);
DROP FUNCTION IF EXISTS awa.close_leases(bigint[], bigint[], bigint[], text[], text[],
                                         timestamptz[], smallint[], text[], text[], text[],
                                         text[]);
DROP FUNCTION IF EXISTS awa.park_lease(bigint, bigint, bigint, text);
DROP FUNCTION IF EXISTS awa.materialize_lease(smallint, bigint, integer, bigint, bigint, bigint,
                                              uuid, uuid, interval);
CREATE OR REPLACE FUNCTION awa.attempt_is_open_v2(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint, p_claim_nonce bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT awa.receipt_is_open(p_claim_slot, p_batch_id, p_item, p_job_id, p_run_lease,
                               p_claim_nonce)
$$;
UPDATE awa.substrate_info SET schema_version = 10;
