-- Which encryption keys the stored jobs still need (awa_django.domain.sealing).
-- A sealed value is a JSON string '<prefix><key id>:<token>' (prefix
-- 'awa:sealed:1:'): the key id is read from the text, nothing is decrypted.

-- name: sealed_key_counts
-- For each place a sealed value can be stored and each key id: how many rows
-- hold at least one value that key sealed (arguments, return value,
-- progress, error messages).  Only rows whose kwargs are sealed are looked
-- at: a job is sealed whole, at enqueue.  'ready' counts every row still
-- in the ready ring, claimed or finished too, until the leader prunes its
-- slot; 'history' the retained terminal rows and batched completions.
WITH sealed (place, job_id, v, progress, errors) AS (
    SELECT 'ready', r.job_id, ARRAY[r.args #>> '{}', r.kwargs #>> '{}'], r.progress, r.errors
      FROM awa.ready_entries r WHERE json_typeof(r.kwargs) = 'string'
    UNION ALL
    SELECT 'deferred', d.job_id, ARRAY[d.args #>> '{}', d.kwargs #>> '{}'], d.progress, d.errors
      FROM awa.deferred_jobs d WHERE json_typeof(d.kwargs) = 'string'
    UNION ALL
    SELECT 'waiting', w.job_id, ARRAY[w.args #>> '{}', w.kwargs #>> '{}'], w.progress, w.errors
      FROM awa.concurrency_waiting w WHERE json_typeof(w.kwargs) = 'string'
    UNION ALL
    SELECT 'dlq', q.job_id, ARRAY[q.args #>> '{}', q.kwargs #>> '{}'], q.progress, q.errors
      FROM awa.dlq_entries q WHERE json_typeof(q.kwargs) = 'string'
    UNION ALL
    SELECT 'history', h.job_id,
           ARRAY[h.args #>> '{}', h.kwargs #>> '{}', h.return_value #>> '{}'], h.progress, h.errors
      FROM awa.done_entries h WHERE json_typeof(h.kwargs) = 'string'
    UNION ALL
    -- Running attempts' flushed progress (only a sealed job's is sealed).
    SELECT 'running', a.job_id, ARRAY[]::text[], a.progress, NULL::jsonb
      FROM awa.attempt_state a WHERE jsonb_typeof(a.progress) = 'string'
    UNION ALL
    -- Completions closed in a batch keep their return values here (JSON text).
    SELECT 'history', c.job_id, ARRAY[c.value::json #>> '{}'], NULL::jsonb, NULL::jsonb
      FROM awa.receipt_completion_batches b
     CROSS JOIN LATERAL unnest(b.job_ids, b.return_values) AS c(job_id, value)
     WHERE starts_with(c.value, '"' || %(prefix)s)
), ids (place, job_id, key_id) AS (
    SELECT s.place, s.job_id, substr(x.text, length(%(prefix)s) + 1, %(id_length)s)
      FROM sealed s
     CROSS JOIN LATERAL (
         SELECT t FROM unnest(s.v || (s.progress #>> '{}')) AS t
         UNION ALL
         SELECT e.entry ->> f.field
           FROM jsonb_array_elements(CASE WHEN jsonb_typeof(s.errors) = 'array'
                                          THEN s.errors ELSE '[]' END) AS e(entry)
          CROSS JOIN (VALUES ('message'), ('traceback')) AS f(field)
     ) AS x(text)
     WHERE starts_with(x.text, %(prefix)s)
)
SELECT place, key_id, count(DISTINCT job_id)::bigint
  FROM ids
 GROUP BY place, key_id
 ORDER BY key_id, place

-- name: sealed_deferred_page
-- Sealed jobs of the deferred table after job id %(after)s, for resealing
-- with the current key (awa_keys reseal): the JSON texts, as stored.
SELECT d.job_id, d.args::text, d.kwargs::text, d.errors::text, d.progress::text
  FROM awa.deferred_jobs d
 WHERE json_typeof(d.kwargs) = 'string' AND d.job_id > %(after)s
 ORDER BY d.job_id
 LIMIT %(limit)s

-- name: sealed_dlq_page
-- The same for the dead-letter table.
SELECT q.job_id, q.args::text, q.kwargs::text, q.errors::text, q.progress::text
  FROM awa.dlq_entries q
 WHERE json_typeof(q.kwargs) = 'string' AND q.job_id > %(after)s
 ORDER BY q.job_id
 LIMIT %(limit)s

-- name: reseal_deferred
-- One deferred job's sealed values replaced, if the row is still the one
-- read (its kwargs text unchanged: not promoted, retried or replaced since).
UPDATE awa.deferred_jobs
   SET args = %(args)s::json, kwargs = %(kwargs)s::json, errors = %(errors)s::jsonb,
       progress = %(progress)s::jsonb
 WHERE job_id = %(job_id)s AND kwargs::text = %(old_kwargs)s
RETURNING job_id

-- name: reseal_dlq
-- The same for a dead letter.
UPDATE awa.dlq_entries
   SET args = %(args)s::json, kwargs = %(kwargs)s::json, errors = %(errors)s::jsonb,
       progress = %(progress)s::jsonb
 WHERE job_id = %(job_id)s AND kwargs::text = %(old_kwargs)s
RETURNING job_id
