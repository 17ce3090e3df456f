-- Per-key concurrency (see schema/concurrency.sql).

-- name: holds_so_far
-- How many times a claim has held a job aside since the install (the
-- waiting table's identity never goes back).
SELECT COALESCE(pg_sequence_last_value('awa.concurrency_waiting_held_seq_seq'::regclass), 0)

-- name: key_usage
-- Running attempts and held jobs of each key.
SELECT k.key,
       (SELECT count(*) FROM awa.concurrency_slots s
         WHERE s.key = k.key AND awa.concurrency_slot_busy(s, NULL))::integer,
       (SELECT count(*) FROM awa.concurrency_waiting w WHERE w.key = k.key)::integer
  FROM (SELECT key FROM awa.concurrency_slots UNION SELECT key FROM awa.concurrency_waiting) k
 WHERE %(key)s::text IS NULL OR k.key = %(key)s::text
 ORDER BY k.key
