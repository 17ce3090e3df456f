-- Undo version 17.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
UPDATE awa.substrate_info SET schema_version = 16;
