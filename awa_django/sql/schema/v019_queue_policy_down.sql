-- Undo version 19: drop what it added.  awa.place_ready and
-- awa.claim_ready_v2 keep their version-19 bodies: same arguments, same
-- results, nothing they need is dropped here.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.state_counts_v2(text[]);
DROP FUNCTION IF EXISTS awa.job_page_v2(bigint, bigint, integer, text, text[], text, smallint,
                                        text);
DROP FUNCTION IF EXISTS awa.claim_ready_v4(text, text[], integer, uuid, interval, interval,
                                           bigint);
DROP FUNCTION IF EXISTS awa.reserve_ready_batch_v2(text[], smallint[], text[], timestamptz[]);
UPDATE awa.substrate_info SET schema_version = 18;
