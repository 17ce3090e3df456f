-- Undo version 22.  Jobs still waiting on dependencies are released as
-- scheduled at the run_at they asked for (a downgrade loses none of them,
-- only the wait), then the triggers, functions and tables go and the
-- deferred_jobs state check is back to version 1's.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DO $$
BEGIN
    IF to_regclass('awa.dependency_holds') IS NOT NULL THEN
        UPDATE awa.deferred_jobs d
           SET state = 'scheduled', run_at = h.run_at
          FROM awa.dependency_holds h
         WHERE d.job_id = h.job_id AND d.state = 'waiting';
    END IF;
    UPDATE awa.deferred_jobs d SET state = 'scheduled', run_at = now()
     WHERE d.state = 'waiting';
END
$$;
DROP TRIGGER IF EXISTS settle_dependencies ON awa.receipt_completion_batches;
DROP TRIGGER IF EXISTS settle_dependencies ON awa.done_entries;
DROP TRIGGER IF EXISTS settle_dependencies ON awa.dlq_entries;
DROP FUNCTION IF EXISTS awa.job_dependency_edges(bigint);
DROP FUNCTION IF EXISTS awa.recheck_dependencies(integer);
DROP FUNCTION IF EXISTS awa.enqueue_dependent(text, smallint, text, json, json, jsonb, text[],
                                              smallint, timestamptz, text, bigint[], text);
DROP FUNCTION IF EXISTS awa.settle_outcome();
DROP FUNCTION IF EXISTS awa.settle_dependencies(bigint[], text);
DROP FUNCTION IF EXISTS awa.cancel_dependents(bigint[], text);
DROP FUNCTION IF EXISTS awa.job_state(bigint);
DROP FUNCTION IF EXISTS awa.drain_queue_v2(text, text);
DROP FUNCTION IF EXISTS awa.state_counts_v3(text[]);
DROP TABLE IF EXISTS awa.dependency_holds;
DROP TABLE IF EXISTS awa.job_dependencies;
DROP SEQUENCE IF EXISTS awa.dependency_use_seq;
ALTER TABLE awa.deferred_jobs DROP CONSTRAINT IF EXISTS deferred_jobs_state_check;
ALTER TABLE awa.deferred_jobs ADD CONSTRAINT deferred_jobs_state_check
    CHECK (state IN ('scheduled', 'retryable'));
