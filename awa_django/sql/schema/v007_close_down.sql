-- Undo version 7.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.close_attempts_v2(smallint[], bigint[], integer[], bigint[], bigint[],
                                              text[], text[], timestamptz[], smallint[], text[],
                                              text[], text[], text[]);
DROP FUNCTION IF EXISTS awa.record_progress_v2(smallint[], bigint[], integer[], bigint[], bigint[],
                                               text[]);
UPDATE awa.substrate_info SET schema_version = 6;
