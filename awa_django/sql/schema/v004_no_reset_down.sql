-- Undo version 4.  awa.reset_data() is not brought back: it was a test aid,
-- and version 3 code never calls it.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
UPDATE awa.substrate_info SET schema_version = 3;
