-- awa_django substrate, version 8: claim-ring prune proofs that cannot
-- double-count.
--
-- The claim-ring gate (awa.ring_slot_busy, version 3) proved a slot closed
-- when the raw count of closure evidence rows reached the number of items
-- handed out.  Evidence written twice for one item (a future cancel or
-- callback path, a bug) would make that proof pass while another receipt
-- of the slot is still open, and prune would drop it.  The proof now counts
-- distinct (batch, item) pairs.  Only the maintenance leader calls this
-- function (through awa.prune_ring), so it is replaced in place.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 8);

CREATE OR REPLACE FUNCTION awa.ring_slot_busy(p_ring text, p_slot integer, p_sealed_at timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_open boolean;
BEGIN
    -- A transaction that began before the slot was sealed may still read it,
    -- and TRUNCATE is not MVCC-safe: wait for such a transaction to end.
    IF EXISTS (
        SELECT 1 FROM pg_stat_activity a
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
           AND a.backend_type = 'client backend'
           AND a.backend_xmin IS NOT NULL AND a.xact_start < p_sealed_at
    ) THEN
        RETURN 'pinned by an older transaction';
    END IF;
    IF p_ring = 'queue' THEN
        RETURN awa.queue_slot_busy(p_slot);
    ELSIF p_ring = 'claim' THEN
        -- Every item handed out in the slot has closure evidence: distinct
        -- (batch, item) pairs, so evidence written twice cannot stand in for
        -- an item that has none.
        EXECUTE format(
            'SELECT (SELECT COALESCE(sum(cardinality(job_ids)), 0) FROM awa.%I)
                  > (SELECT count(*) FROM (SELECT x.batch_id, x.item FROM awa.%I x
                                           UNION
                                           SELECT y.batch_id, unnest(y.items) FROM awa.%I y) e)',
            'lease_claim_batches_' || p_slot, 'lease_claim_closures_' || p_slot,
            'lease_claim_closure_batches_' || p_slot)
           INTO v_open;
        RETURN CASE WHEN v_open THEN 'open receipts' END;
    ELSE
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM awa.%I)', 'leases_' || p_slot) INTO v_open;
        RETURN CASE WHEN v_open THEN 'live leases' END;
    END IF;
END
$$;
