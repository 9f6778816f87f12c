-- Named queries on workers (who is alive and serving which stages).

-- name: upsert_worker
-- Register a worker process or record that it is still alive; returns the stages the
-- other workers seen in the last $3 seconds serve (a completion need not NOTIFY for a
-- stage only its own worker runs: see complete_and_claim).
-- $1 worker id, $2 stages, $3 seconds
WITH me AS (
    INSERT INTO workers (id, stages) VALUES ($1, $2)
    ON CONFLICT (id) DO UPDATE SET last_seen_at = now(), stages = excluded.stages
)
SELECT DISTINCT unnest(stages) AS stage FROM workers
WHERE id <> $1 AND last_seen_at >= now() - make_interval(secs => $3);

-- name: announce_worker
-- A worker joined: the others count it among who serves a stage from now on.
-- $1 channel, $2 payload
SELECT pg_notify($1, $2);

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

-- name: codec_types
-- The types whose codecs asyncpg looks up in the catalog the first time a connection's
-- statement uses them (arrays the queries bind, ragline's enums), as SQL type names:
-- runtime.db.connect.prime_codecs names them all in one statement on each new connection.
SELECT format_type(t.oid, NULL) AS name
FROM pg_type AS t
WHERE (t.typtype = 'e' AND t.typname LIKE 'ragline\_%'
       AND t.typnamespace = current_schema()::regnamespace)
   OR t.oid IN ('int4[]'::regtype, 'int8[]'::regtype, 'uuid[]'::regtype, 'bool[]'::regtype,
                'bytea[]'::regtype, 'float8[]'::regtype)
ORDER BY 1;
