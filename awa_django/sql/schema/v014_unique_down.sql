-- Undo version 14.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.cleanup_unique_claims(interval, integer);
DROP FUNCTION IF EXISTS awa.enqueue_unique(text, text[], text, smallint, text, json, json, jsonb,
                                           text[], smallint, timestamptz, text);
DROP TABLE IF EXISTS awa.unique_claims;
UPDATE awa.substrate_info SET schema_version = 13;
