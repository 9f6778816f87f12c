-- Named queries on workers (who is alive and serving which stages).

-- name: upsert_worker
-- Register a worker process or record that it is still alive.
-- $1 worker id, $2 stages
INSERT INTO workers (id, stages) VALUES ($1, $2)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), stages = excluded.stages;

-- name: delete_worker
-- A worker process leaves.
-- $1 worker id
DELETE FROM workers WHERE id = $1;

-- name: prune_workers
-- Forget workers not seen for $1 seconds.
-- $1 seconds
DELETE FROM workers WHERE last_seen_at < now() - make_interval(secs => $1);

-- name: live_workers
-- Workers seen in the last $1 seconds.
-- $1 seconds
SELECT id, stages, started_at, last_seen_at FROM workers
WHERE last_seen_at >= now() - make_interval(secs => $1) ORDER BY id;
