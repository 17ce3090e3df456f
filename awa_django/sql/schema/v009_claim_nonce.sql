-- awa_django substrate, version 9: a claim nonce in the run_lease guard.
--
-- Claims commit with synchronous_commit = off.  A server crash can revert
-- the last claims while the workers that received them keep running their
-- handlers; the re-claim of such a job issues the same run_lease, and
-- claim_batch_seq can roll back with it, so the reverted attempt's key
-- (claim_slot, batch_id, item, job_id, run_lease) may name the new attempt
-- too, and its late completion would close the attempt that is running now.
--
-- Every claim batch now carries a random nonce chosen by the claiming
-- worker.  A close, a progress write and the "was my attempt closed?"
-- question match the nonce as well, so only the holder of the claim that
-- survived can close it; a reverted claim's handler is told it was closed
-- (its context is cancelled) and its completion is rejected as stale.
--
-- awa.claim_ready_v3 is awa.claim_ready_v2 with the nonce: it sets the
-- transaction-local setting awa.claim_nonce, which the column default of
-- lease_claim_batches.claim_nonce reads, and calls version 2 (which stays
-- unchanged for workers of the previous release; their batches carry NULL).
-- awa.close_attempts_v3 locks the batches, drops items whose nonce does not
-- match, and applies the rest through awa.close_attempts_v2.  Adding the
-- column rewrites nothing: it is nullable and its default is not volatile.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 9);

ALTER TABLE awa.lease_claim_batches ADD COLUMN IF NOT EXISTS claim_nonce bigint;
ALTER TABLE awa.lease_claim_batches
    ALTER COLUMN claim_nonce SET DEFAULT NULLIF(current_setting('awa.claim_nonce', true), '')::bigint;
COMMENT ON COLUMN awa.lease_claim_batches.claim_nonce IS
    'Random number chosen by the claiming worker (awa.claim_ready_v3 passes it through the '
    'transaction-local setting awa.claim_nonce); closes must present it.';

-- Elements of an array at the given 1-based positions, in that order (NULL
-- stays NULL: a NULL column means "every item has the default").
CREATE OR REPLACE FUNCTION awa.array_pick(p_values anyarray, p_positions integer[])
RETURNS anyarray
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_values IS NULL THEN NULL
                ELSE ARRAY(SELECT p_values[k.pos]
                             FROM unnest(p_positions) WITH ORDINALITY AS k(pos, n)
                            ORDER BY k.n) END
$$;

CREATE OR REPLACE FUNCTION awa.attempt_is_open_v2(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint, p_claim_nonce bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                    WHERE b.batch_id = p_batch_id AND b.claim_slot = p_claim_slot
                      AND b.job_ids[p_item] = p_job_id AND b.run_leases[p_item] = p_run_lease
                      AND b.claim_nonce IS NOT DISTINCT FROM p_claim_nonce)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                        WHERE x.batch_id = p_batch_id AND x.item = p_item
                          AND x.claim_slot = p_claim_slot)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                        WHERE y.batch_id = p_batch_id AND y.claim_slot = p_claim_slot
                          AND p_item = ANY (y.items))
$$;

CREATE OR REPLACE FUNCTION awa.claim_ready_v3(
    p_queue text, p_max integer, p_runtime uuid, p_deadline interval, p_aging interval,
    p_claim_nonce bigint)
RETURNS TABLE (job_id bigint, run_lease bigint, kind text, priority smallint,
               effective_priority smallint, attempt smallint, max_attempts smallint,
               args text, kwargs text, metadata text, tags text[], errors text, progress text,
               claim_slot smallint, batch_id bigint, item integer,
               deadline_at timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    -- Read by the column default when version 2 writes the batch row.
    PERFORM set_config('awa.claim_nonce', COALESCE(p_claim_nonce::text, ''), true);
    RETURN QUERY
    SELECT * FROM awa.claim_ready_v2(p_queue, p_max, p_runtime, p_deadline, p_aging);
    PERFORM set_config('awa.claim_nonce', '', true);
END
$$;

CREATE OR REPLACE FUNCTION awa.close_attempts_v3(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_claim_nonces bigint[], p_targets text[], p_outcomes text[],
    p_run_ats timestamptz[], p_attempts smallint[], p_errors text[], p_results text[],
    p_reasons text[], p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_slots  smallint[];
    v_ids    bigint[];
    v_nonces bigint[];
    v_keep   integer[];
BEGIN
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    -- The guard's batch lock (version 2 takes it again, a no-op), and the
    -- nonces of the batches it holds.
    SELECT array_agg(b.claim_slot), array_agg(b.batch_id), array_agg(b.claim_nonce)
      INTO v_slots, v_ids, v_nonces
      FROM (SELECT l.claim_slot, l.batch_id, l.claim_nonce
              FROM awa.lease_claim_batches l
             WHERE l.claim_slot = ANY (p_claim_slots)
               AND (l.batch_id, l.claim_slot) IN (SELECT DISTINCT x.batch_id, x.claim_slot
                                                    FROM unnest(p_batch_ids, p_claim_slots)
                                                         AS x(batch_id, claim_slot))
             ORDER BY l.batch_id
               FOR UPDATE) b;

    -- Positions whose nonce matches the batch that holds them.
    SELECT COALESCE(array_agg(x.pos ORDER BY x.pos), '{}')
      INTO v_keep
      FROM unnest(p_claim_slots, p_batch_ids, p_claim_nonces) WITH ORDINALITY
           AS x(claim_slot, batch_id, nonce, pos)
      JOIN unnest(v_slots, v_ids, v_nonces) AS b(claim_slot, batch_id, nonce)
        ON b.claim_slot = x.claim_slot AND b.batch_id = x.batch_id
     WHERE b.nonce IS NOT DISTINCT FROM x.nonce;

    IF cardinality(v_keep) = cardinality(p_job_ids) THEN
        RETURN QUERY
        SELECT * FROM awa.close_attempts_v2(p_claim_slots, p_batch_ids, p_items, p_job_ids,
                                            p_run_leases, p_targets, p_outcomes, p_run_ats,
                                            p_attempts, p_errors, p_results, p_reasons,
                                            p_progress);
    ELSIF cardinality(v_keep) > 0 THEN
        RETURN QUERY
        SELECT * FROM awa.close_attempts_v2(
            awa.array_pick(p_claim_slots, v_keep), awa.array_pick(p_batch_ids, v_keep),
            awa.array_pick(p_items, v_keep), awa.array_pick(p_job_ids, v_keep),
            awa.array_pick(p_run_leases, v_keep), awa.array_pick(p_targets, v_keep),
            awa.array_pick(p_outcomes, v_keep), awa.array_pick(p_run_ats, v_keep),
            awa.array_pick(p_attempts, v_keep), awa.array_pick(p_errors, v_keep),
            awa.array_pick(p_results, v_keep), awa.array_pick(p_reasons, v_keep),
            awa.array_pick(p_progress, v_keep));
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION awa.record_progress_v3(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_claim_nonces bigint[], p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    PERFORM 1
       FROM awa.lease_claim_batches b
      WHERE b.claim_slot = ANY (p_claim_slots)
        AND (b.batch_id, b.claim_slot) IN (SELECT DISTINCT x.batch_id, x.claim_slot
                                             FROM unnest(p_batch_ids, p_claim_slots)
                                                  AS x(batch_id, claim_slot))
      ORDER BY b.batch_id
        FOR UPDATE;
    RETURN QUERY
    INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, updated_at)
    SELECT i.job_id, i.run_lease, i.progress::jsonb, now()
      FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases, p_claim_nonces,
                  p_progress)
           AS i(claim_slot, batch_id, item, job_id, run_lease, claim_nonce, progress)
     WHERE awa.attempt_is_open_v2(i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease,
                                  i.claim_nonce)
    ON CONFLICT ON CONSTRAINT attempt_state_pkey
    DO UPDATE SET progress = EXCLUDED.progress, updated_at = EXCLUDED.updated_at
    RETURNING s.job_id, s.run_lease;
END
$$;

-- Which of these attempts are no longer theirs to close: closed by someone
-- (rescue, cancel, hand-back), or never committed (a claim a crash reverted).
CREATE OR REPLACE FUNCTION awa.closed_attempts_v2(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_claim_nonces bigint[])
RETURNS TABLE (job_id bigint, run_lease bigint, claim_nonce bigint)
LANGUAGE sql STABLE AS $$
    SELECT i.job_id, i.run_lease, i.claim_nonce
      FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases, p_claim_nonces)
           AS i(claim_slot, batch_id, item, job_id, run_lease, claim_nonce)
     WHERE NOT awa.attempt_is_open_v2(i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease,
                                      i.claim_nonce)
$$;
