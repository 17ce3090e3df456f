-- Statements only the test kit (awa_django.testing) runs.

-- name: bring_forward
-- Deferred jobs due by the test's frozen clock become due by the database's
-- clock, so the real promotion moves them to the ready ring; their run_at
-- becomes the moment this ran.
UPDATE awa.deferred_jobs
   SET run_at = clock_timestamp()
 WHERE run_at <= %(until)s
   AND run_at > clock_timestamp()
   AND (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]))

-- name: released_due
-- Whether a dependency's outcome released dependents that are due now
-- (they wait for the leader's promotion, which a test does not run).
SELECT EXISTS (SELECT 1 FROM awa.deferred_jobs
                WHERE state = 'scheduled' AND run_at <= clock_timestamp()
                  AND metadata ? 'awa:depends_on'
                  AND (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[])))

-- name: lock_timeout
SELECT current_setting('lock_timeout')

-- name: set_lock_timeout
-- Promotion sets a 20 ms lock_timeout for the rest of the transaction (it
-- never waits on a producer); a test's transaction gets its own back.
SELECT set_config('lock_timeout', %s, true)

-- name: queues_with_unclaimed_lanes
-- Queues with a lane whose enqueue head is past its claim cursor: every
-- queue with a ready job, and maybe a few more (sequence numbers a producer
-- reserved and has not committed, tombstones): the claim decides.
SELECT DISTINCT e.queue
  FROM awa.queue_enqueue_heads e
  JOIN awa.queue_claim_heads c USING (queue, priority, shard)
 WHERE e.next_seq > c.claim_seq
 ORDER BY 1
