-- Reverse of v002_runtime.sql.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.queues_have_work(text[]);
DROP FUNCTION IF EXISTS awa.promote_due(integer);
DROP FUNCTION IF EXISTS awa.record_progress(smallint[], bigint[], integer[], bigint[],
                                            bigint[], text[]);
DROP FUNCTION IF EXISTS awa.attempt_is_open(smallint, bigint, integer, bigint, bigint);
DROP FUNCTION IF EXISTS awa.close_attempts(smallint[], bigint[], integer[], bigint[], bigint[],
                                           text[], text[], timestamptz[], smallint[], text[],
                                           text[], text[], text[]);
DROP FUNCTION IF EXISTS awa.claim_ready(text, integer, uuid, interval, interval);
DROP TABLE IF EXISTS awa.runtime_instances;
UPDATE awa.substrate_info SET schema_version = 1;
