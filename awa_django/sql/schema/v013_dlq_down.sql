-- Undo version 13.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.move_failed_to_dlq(bigint, text);
DROP FUNCTION IF EXISTS awa.dlq_select(text, text, timestamptz, integer);
DROP FUNCTION IF EXISTS awa.dlq_purge(bigint[]);
DROP FUNCTION IF EXISTS awa.dlq_retry(bigint[], text, smallint);
DROP INDEX IF EXISTS awa.dlq_entries_moved_at_idx;
UPDATE awa.substrate_info SET schema_version = 12;
