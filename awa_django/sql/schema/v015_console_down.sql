-- Undo version 15.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.sample_queues(interval);
DROP TABLE IF EXISTS awa.queue_samples;
DROP FUNCTION IF EXISTS awa.drain_queue(text, text);
DROP FUNCTION IF EXISTS awa.state_counts(text);
DROP FUNCTION IF EXISTS awa.job_page(bigint, bigint, integer, text, text, text, smallint, text);
DROP FUNCTION IF EXISTS awa.job_window(bigint, bigint);
DROP INDEX IF EXISTS awa.lease_claim_batches_max_id_idx;
DROP INDEX IF EXISTS awa.receipt_completion_batches_max_id_idx;
DROP FUNCTION IF EXISTS awa.min_id(bigint[]);
DROP FUNCTION IF EXISTS awa.max_id(bigint[]);
DROP FUNCTION IF EXISTS awa.cleanup_descriptors(interval);
DROP FUNCTION IF EXISTS awa.descriptor_status(text, interval);
DROP FUNCTION IF EXISTS awa.sync_descriptors(uuid, text, text[], text[], text[], text[], text[],
                                             text[], text[], text[], text[]);
ALTER TABLE awa.runtime_instances DROP COLUMN IF EXISTS descriptor_hashes,
                                  DROP COLUMN IF EXISTS role;
DROP TABLE IF EXISTS awa.job_kind_descriptors;
DROP TABLE IF EXISTS awa.queue_descriptors;
UPDATE awa.substrate_info SET schema_version = 14;
