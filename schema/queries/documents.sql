-- Named queries on documents.

-- name: insert_document
-- Insert a document unless the same bytes (unforced) are already there; returns the id
-- of the new row, or nothing when it already existed.
-- $1 id, $2 filename, $3 media type, $4 byte size, $5 sha256, $6 asset key, $7 forced,
-- $8 first stage, $9 collection
INSERT INTO documents (id, filename, media_type, byte_size, sha256, asset_key, forced, stage,
                       collection)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (collection, sha256) WHERE NOT forced DO NOTHING
RETURNING id;

-- name: find_document_by_sha256
-- The unforced document holding these bytes in a collection.
-- $1 sha256, $2 collection
SELECT id, filename, media_type, byte_size, sha256, asset_key, status::text AS status, stage,
       error, generation, created_at, updated_at, collection
FROM documents WHERE sha256 = $1 AND collection = $2 AND NOT forced;

-- name: get_document
-- One document.
-- $1 id
SELECT id, filename, media_type, byte_size, sha256, asset_key, status::text AS status, stage,
       error, generation, created_at, updated_at, collection
FROM documents WHERE id = $1;

-- name: get_documents
-- Several documents.
-- $1 ids
SELECT id, filename, media_type, byte_size, sha256, asset_key, status::text AS status, stage,
       error, generation, created_at, updated_at, collection
FROM documents WHERE id = ANY($1::uuid[]) ORDER BY created_at, id;

-- name: start_generation
-- Begin a new generation of a document at stage $2 (first submission or reprocess):
-- bump the generation (unless $3 is false), set it pending at that stage.
-- $1 id, $2 stage, $3 bump
UPDATE documents
SET generation = generation + CASE WHEN $3 THEN 1 ELSE 0 END,
    status = 'pending', stage = $2, error = NULL, updated_at = now()
WHERE id = $1
RETURNING generation;

-- name: retire_document
-- Stop a document about to be deleted: a new generation with no job, so a worker still
-- running one of the old generation's jobs commits nothing (cancel_document_jobs).
-- $1 id
UPDATE documents SET generation = generation + 1, updated_at = now()
WHERE id = $1
RETURNING generation;

-- name: delete_documents
-- Delete documents (their jobs and checkpoints cascade).
-- $1 ids
DELETE FROM documents WHERE id = ANY($1::uuid[]) RETURNING id;

-- name: count_documents_by_status
-- Documents per status, from the counts the triggers keep (0022), not the table.
SELECT status::text AS status, sum(n)::bigint AS n
FROM document_counts GROUP BY status HAVING sum(n) <> 0;

-- name: count_finished
-- How many of these documents are ready or failed.
-- $1 ids
SELECT count(*) FROM documents WHERE id = ANY($1::uuid[]) AND status IN ('ready', 'failed');

-- name: all_document_ids
-- Every document (of one collection, or of all when $1 is NULL), oldest first.
-- $1 collection
SELECT id FROM documents WHERE $1::text IS NULL OR collection = $1 ORDER BY created_at, id;

-- name: documents_named
-- The documents of a file name (of one collection, or of all when $2 is NULL), oldest
-- first, at most $3: the CLI takes a name where it takes an id when it is one document's.
-- $1 filename, $2 collection, $3 limit
SELECT id, collection FROM documents
WHERE filename = $1 AND ($2::text IS NULL OR collection = $2)
ORDER BY created_at, id
LIMIT $3;

-- name: documents_after
-- The next page of documents oldest first, after a cursor (the last row of the page
-- before): verify's walk, a page in memory at a time. Of one collection, or all.
-- $1 collection (NULL: all), $2 cursor created_at (NULL: from the first), $3 cursor id,
-- $4 limit
SELECT id, filename, media_type, byte_size, sha256, asset_key, status::text AS status, stage,
       error, generation, created_at, updated_at, collection
FROM documents
WHERE ($1::text IS NULL OR collection = $1)
  AND ($2::timestamptz IS NULL OR (created_at, id) > ($2, $3::uuid))
ORDER BY created_at, id
LIMIT $4;

-- name: existing_documents
-- Which of these documents exist (verify's check of points no page of documents named).
-- $1 ids
SELECT id FROM documents WHERE id = ANY($1::uuid[]);

-- name: list_documents
-- Documents, newest first, optionally of one status.
-- $1 status (NULL: any), $2 limit
SELECT id, filename, media_type, byte_size, sha256, asset_key, status::text AS status, stage,
       error, generation, created_at, updated_at, collection
FROM documents
WHERE $1::text IS NULL OR status = $1::ragline_document_status
ORDER BY created_at DESC, id DESC
LIMIT $2;
