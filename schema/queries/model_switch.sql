-- Named queries for collections and the switch of embedding model (stages.ports.collections,
-- stages.db.model_switch).

-- name: get_alias
-- The live vector collection of an alias.
-- $1 alias
SELECT alias, model, dimensions, collection FROM vector_aliases WHERE alias = $1;

-- name: targets
-- What embed and index jobs read before writing, in one round trip: the live vector
-- collection, the alias's migration while it builds (NULL columns otherwise) and the
-- document's collection (NULL when the row is gone or $2 is NULL). No row: the alias is
-- not recorded yet.
-- $1 alias, $2 document id (or NULL)
SELECT a.model, a.dimensions, a.collection,
       (SELECT d.collection FROM documents AS d WHERE d.id = $2) AS tenant,
       m.id AS m_id, m.alias AS m_alias, m.from_model AS m_from_model,
       m.from_collection AS m_from_collection, m.to_model AS m_to_model,
       m.to_dimensions AS m_to_dimensions, m.to_collection AS m_to_collection,
       m.state AS m_state, m.started_at AS m_started_at, m.swapped_at AS m_swapped_at,
       m.finished_at AS m_finished_at
FROM vector_aliases AS a
LEFT JOIN model_migrations AS m ON m.alias = a.alias AND m.state = 'building'
WHERE a.alias = $1;

-- name: init_alias
-- Record the live vector collection the first time it is asked for (the configured model).
-- $1 alias, $2 model, $3 dimensions, $4 collection
INSERT INTO vector_aliases (alias, model, dimensions, collection) VALUES ($1, $2, $3, $4)
ON CONFLICT (alias) DO NOTHING;

-- name: lock_alias
-- The alias row, locked for a swap (FOR UPDATE) so no index commit runs beside it.
-- $1 alias
SELECT alias, model, dimensions, collection FROM vector_aliases WHERE alias = $1 FOR UPDATE;

-- name: share_alias
-- The alias row, share-locked by an index stage's commit: a swap waits for it, and it
-- sees a swap that committed first.
-- $1 alias
SELECT alias, model, dimensions, collection FROM vector_aliases WHERE alias = $1 FOR SHARE;

-- name: set_alias
-- Point the alias at another model's physical collection.
-- $1 alias, $2 model, $3 dimensions, $4 collection
UPDATE vector_aliases SET model = $2, dimensions = $3, collection = $4, updated_at = now()
WHERE alias = $1;

-- name: open_migration
-- The unfinished migration of an alias, if any.
-- $1 alias
SELECT id, alias, from_model, from_collection, to_model, to_dimensions, to_collection, state,
       started_at, swapped_at, finished_at
FROM model_migrations WHERE alias = $1 AND state IN ('building', 'swapped');

-- name: last_migration
-- The newest migration of an alias, finished or not.
-- $1 alias
SELECT id, alias, from_model, from_collection, to_model, to_dimensions, to_collection, state,
       started_at, swapped_at, finished_at
FROM model_migrations WHERE alias = $1 ORDER BY id DESC LIMIT 1;

-- name: start_migration
-- Begin a migration (the unique index allows one unfinished per alias).
-- $1 alias, $2 from model, $3 from collection, $4 to model, $5 to dimensions, $6 to collection
INSERT INTO model_migrations (alias, from_model, from_collection, to_model, to_dimensions,
                              to_collection)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id, alias, from_model, from_collection, to_model, to_dimensions, to_collection, state,
          started_at, swapped_at, finished_at;

-- name: migration_todo
-- Ready documents the migration does not have in its new collection at their generation.
-- $1 migration id, $2 limit
SELECT d.id, d.generation, d.filename, d.collection
FROM documents d
WHERE d.status = 'ready'
  AND NOT EXISTS (SELECT 1 FROM model_migration_documents m
                  WHERE m.migration_id = $1 AND m.document_id = d.id
                    AND m.generation = d.generation)
ORDER BY d.created_at, d.id
LIMIT $2;

-- name: mark_migrated
-- The document's points of this generation are in the migration's collection (only while
-- the document is still at that generation: a reprocess since then needs another pass).
-- $1 migration id, $2 document id, $3 generation, $4 points
INSERT INTO model_migration_documents (migration_id, document_id, generation, points)
SELECT $1, $2, $3, $4 FROM documents WHERE id = $2 AND generation = $3
ON CONFLICT (migration_id, document_id) DO UPDATE
SET generation = excluded.generation, points = excluded.points, migrated_at = now()
RETURNING document_id;

-- name: unmark_migrated
-- Forget a document's pass (its points in the new collection may be of a stale generation).
-- $1 migration id, $2 document id
DELETE FROM model_migration_documents WHERE migration_id = $1 AND document_id = $2;

-- name: migration_progress
-- Ready documents, and those of them the migration has at their generation.
-- $1 migration id
SELECT count(*) FILTER (WHERE d.status = 'ready') AS ready,
       count(m.document_id) FILTER (WHERE d.status = 'ready') AS migrated
FROM documents d
LEFT JOIN model_migration_documents m
       ON m.migration_id = $1 AND m.document_id = d.id AND m.generation = d.generation;

-- name: swap_migration
-- Mark the migration swapped (the alias row changes in the same transaction).
-- $1 migration id
UPDATE model_migrations SET state = 'swapped', swapped_at = now()
WHERE id = $1 AND state = 'building';

-- name: finish_migration
-- The old collection is deleted: the migration is done.
-- $1 migration id
UPDATE model_migrations SET state = 'done', finished_at = now()
WHERE id = $1 AND state = 'swapped';

-- name: cancel_migration
-- Give up a migration that has not swapped (its new collection is deleted by the caller).
-- $1 migration id
UPDATE model_migrations SET state = 'cancelled', finished_at = now()
WHERE id = $1 AND state = 'building';

-- name: in_flight_past_embed
-- Documents on their way through index (not ready, not failed): at a swap they are
-- embedded again with the new model.
SELECT id FROM documents WHERE status IN ('pending', 'processing') AND stage = 'index';

-- name: try_migration_lock
-- One migrator at a time (session lock: released when the process dies).
-- $1 key
SELECT pg_try_advisory_lock($1);

-- name: release_migration_lock
-- $1 key
SELECT pg_advisory_unlock($1);

-- name: collection_counts
-- Documents per collection and status, from the counts the triggers keep (0022).
SELECT collection, status::text AS status, sum(n)::bigint AS n
FROM document_counts GROUP BY collection, status HAVING sum(n) <> 0
ORDER BY collection, status;
