-- Undo version 10: leaders prune with awa.prune_ring (version 3, its gates
-- as version 8 left them) again; the hold column goes with its writer.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.prune_ring_v2(text, integer, interval);
DROP FUNCTION IF EXISTS awa.ring_slot_stamp(text, integer);
DROP FUNCTION IF EXISTS awa.ring_slot_pinned(timestamptz);
DROP FUNCTION IF EXISTS awa.record_ring_outcome_v2(text, text, text, integer, bigint,
                                                   double precision);
ALTER TABLE awa.ring_status DROP COLUMN IF EXISTS last_prune_exclusive_ms;
UPDATE awa.substrate_info SET schema_version = 9;
