-- Undo version 18.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.refund_rate_tokens(text, integer, integer);
DROP FUNCTION IF EXISTS awa.take_rate_tokens(text, integer, double precision, integer);
DROP TABLE IF EXISTS awa.rate_buckets;
UPDATE awa.substrate_info SET schema_version = 17;
