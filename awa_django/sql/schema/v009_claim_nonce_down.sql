-- Undo version 9.  The claim_nonce column stays (version 8 ignores it); its
-- default goes, so batches written from now on carry NULL.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
ALTER TABLE awa.lease_claim_batches ALTER COLUMN claim_nonce DROP DEFAULT;
DROP FUNCTION IF EXISTS awa.claim_ready_v3(text, integer, uuid, interval, interval, bigint);
DROP FUNCTION IF EXISTS awa.close_attempts_v3(smallint[], bigint[], integer[], bigint[], bigint[],
                                              bigint[], text[], text[], timestamptz[], smallint[],
                                              text[], text[], text[], text[]);
DROP FUNCTION IF EXISTS awa.record_progress_v3(smallint[], bigint[], integer[], bigint[], bigint[],
                                               bigint[], text[]);
DROP FUNCTION IF EXISTS awa.closed_attempts_v2(smallint[], bigint[], integer[], bigint[], bigint[],
                                               bigint[]);
DROP FUNCTION IF EXISTS awa.attempt_is_open_v2(smallint, bigint, integer, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS awa.array_pick(anyarray, integer[]);
UPDATE awa.substrate_info SET schema_version = 8;
