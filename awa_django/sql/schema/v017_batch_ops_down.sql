-- Undo version 17.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.batch_op_step(bigint, integer, integer);
DROP FUNCTION IF EXISTS awa.submit_batch_operation(text, jsonb, jsonb);
DROP FUNCTION IF EXISTS awa.batch_op_count(text, jsonb, jsonb, bigint);
DROP FUNCTION IF EXISTS awa.batch_op_plan(text, jsonb, jsonb);
DROP TABLE IF EXISTS awa.batch_operations;
UPDATE awa.substrate_info SET schema_version = 16;
