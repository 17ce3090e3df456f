-- Unapply 0006_edit_and_retry: drop awa.edit_and_retry and step the substrate back.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.edit_and_retry(bigint, json, json, text);
UPDATE awa.substrate_info SET schema_version = LEAST(schema_version, 5);
