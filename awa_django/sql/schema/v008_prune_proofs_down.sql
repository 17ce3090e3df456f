-- Undo version 8: the version-3 claim-ring proof (raw evidence counts).
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

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
        -- Count proof: every item handed out in the slot has exactly one piece
        -- of closure evidence (the close guard never writes two).
        EXECUTE format(
            'SELECT (SELECT COALESCE(sum(cardinality(job_ids)), 0) FROM awa.%I)
                  > (SELECT count(*) FROM awa.%I)
                  + (SELECT COALESCE(sum(cardinality(items)), 0) FROM awa.%I)',
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

UPDATE awa.substrate_info SET schema_version = 7;
