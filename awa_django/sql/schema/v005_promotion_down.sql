-- Undo version 5.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.promote_due_skip_busy(integer);
DROP FUNCTION IF EXISTS awa.place_deferred(awa.deferred_jobs[]);
UPDATE awa.substrate_info SET schema_version = 4;
