-- Unapply 0011_outbox_fence: drop the relay's fence and step the substrate back.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.relay_dependent(bigint, text, smallint, text, json, json, jsonb,
                                            text[], smallint, timestamptz, text, bigint[], text);
DROP FUNCTION IF EXISTS awa.relay_unique(bigint, text, text[], text, smallint, text, json, json,
                                         jsonb, text[], smallint, timestamptz, text);
DROP FUNCTION IF EXISTS awa.truncate_outbox_fence(smallint);
DROP TABLE IF EXISTS awa.outbox_fence;
UPDATE awa.substrate_info SET schema_version = LEAST(schema_version, 9);
