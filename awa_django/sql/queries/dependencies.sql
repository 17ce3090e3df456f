-- Job dependencies (see schema/dependencies.sql).

-- name: recheck
SELECT awa.recheck_dependencies(%s)

-- name: edges
-- The open edges around one job: what it waits on, what waits on it.
SELECT waiting_on, blocking FROM awa.job_dependency_edges(%s)

-- name: waiting_count
SELECT count(*) FROM awa.dependency_holds
