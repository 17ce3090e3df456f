-- Undo version 12: drop the periodic schedules (their jobs stay queued).
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP TABLE IF EXISTS awa.periodic_schedules;
UPDATE awa.substrate_info SET schema_version = 11;
