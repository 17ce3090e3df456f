-- Undo version 16.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP TABLE IF EXISTS awa.queue_overrides;
UPDATE awa.substrate_info SET schema_version = 15;
