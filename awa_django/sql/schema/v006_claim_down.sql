-- Undo version 6.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.claim_ready_v2(text, integer, uuid, interval, interval);
UPDATE awa.substrate_info SET schema_version = 5;
