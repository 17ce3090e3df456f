-- Queue and job-kind descriptor catalogs (see schema/console.sql).

-- name: sync_descriptors
SELECT awa.sync_descriptors(%s, %s, %s::text[], %s::text[], %s::text[], %s::text[],
                            %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])

-- name: descriptor_status
SELECT name, display_name, description, owner, docs_url, tags, extra::text, hash, queue,
       first_seen_at, last_seen_at, stale, drift, live_hashes
  FROM awa.descriptor_status(%s, make_interval(secs => %s))

-- name: cleanup_descriptors
SELECT awa.cleanup_descriptors(make_interval(secs => %s))
