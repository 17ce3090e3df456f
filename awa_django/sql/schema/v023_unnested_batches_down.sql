-- Undo version 23: closes go back to awa.close_attempts_v3, claims to
-- awa.claim_ready_v6, prunes to awa.prune_ring_v3 and rescues to
-- awa.rescue_v2 (all unchanged), awa.open_receipts to its item-by-item
-- test and awa.queue_slot_busy to version 11's, COPY batches to
-- awa.reserve_ready_batch_v2 (ready_entries' timestamps lose their
-- defaults), and columns compressed with lz4 go back to the server's
-- default method (values already written keep theirs).
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.close_attempts_v4(smallint[], bigint[], integer[], bigint[], bigint[],
                                              bigint[], text[], text[], timestamptz[],
                                              smallint[], text[], text[], text[], text[]);
CREATE OR REPLACE VIEW awa.open_receipts AS
SELECT c.*
  FROM awa.claim_items c
 WHERE NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                    WHERE x.batch_id = c.batch_id AND x.item = c.item
                      AND x.claim_slot = c.claim_slot)
   AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                    WHERE y.batch_id = c.batch_id AND y.claim_slot = c.claim_slot
                      AND c.item = ANY (y.items));
DO $$
DECLARE
    v_column record;
BEGIN
    FOR v_column IN
        SELECT a.attrelid::regclass AS rel, a.attname
          FROM pg_attribute a
          JOIN pg_class c ON c.oid = a.attrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'awa'
         WHERE a.attcompression = 'l' AND NOT a.attisdropped
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET COMPRESSION default',
                       v_column.rel, v_column.attname);
    END LOOP;
END
$$;
DROP FUNCTION IF EXISTS awa.claim_ready_v8(text, text[], integer, uuid, interval, interval, bigint);
DROP FUNCTION IF EXISTS awa.claim_ready_v7(text, integer, uuid, interval, interval);
DROP FUNCTION IF EXISTS awa.reserve_ready_run(text, smallint, integer);
ALTER TABLE awa.ready_entries ALTER COLUMN created_at DROP DEFAULT;
ALTER TABLE awa.ready_entries ALTER COLUMN run_at DROP DEFAULT;
DROP FUNCTION IF EXISTS awa.prune_ring_v5(text, integer, interval);
DROP FUNCTION IF EXISTS awa.prune_ring_v4(text, integer, interval);
DROP FUNCTION IF EXISTS awa.rescue_v3(text, interval, boolean, text[], text[], integer);
CREATE OR REPLACE FUNCTION awa.queue_slot_busy(p_slot integer)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM awa.ready_segments g
          JOIN awa.queue_claim_heads h
            ON h.queue = g.queue AND h.priority = g.priority AND h.shard = g.shard
         WHERE g.ready_slot = p_slot AND g.end_seq > h.claim_seq
    ) THEN
        RETURN 'claimable ready rows';
    END IF;
    IF EXISTS (SELECT 1 FROM awa.leases l WHERE l.ready_slot = p_slot) THEN
        RETURN 'live leases';
    END IF;
    IF EXISTS (SELECT 1 FROM awa.open_receipts c WHERE c.ready_slot = p_slot) THEN
        RETURN 'open receipts';
    END IF;
    RETURN NULL;
END
$$;
UPDATE awa.substrate_info SET schema_version = LEAST(schema_version, 22);
