-- Named queries of the HTTP API (`serve`): pages of documents, counts, upload keys.

-- name: documents_page
-- Documents newest first, filtered, after a cursor (the last row of the previous page).
-- $1 status (NULL: any), $2 stage (NULL: any), $3 cursor created_at (NULL: first page),
-- $4 cursor id, $5 limit
SELECT id, filename, media_type, byte_size, sha256, asset_key, status::text AS status, stage,
       error, generation, created_at, updated_at
FROM documents
WHERE ($1::text IS NULL OR status = $1::ragline_document_status)
  AND ($2::text IS NULL OR stage = $2)
  AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4::uuid))
ORDER BY created_at DESC, id DESC
LIMIT $5;

-- name: document_counts
-- A document's checkpoint sizes: pages (parse), images (parse), described images
-- (vision), chunks of the current generation by kind.
-- $1 document id, $2 generation
SELECT (SELECT count(*) FROM pages WHERE document_id = $1) AS pages,
       (SELECT count(*) FROM assets WHERE document_id = $1) AS images,
       (SELECT count(*) FROM assets WHERE document_id = $1 AND description IS NOT NULL)
           AS described_images,
       (SELECT count(*) FROM chunks WHERE document_id = $1 AND generation = $2) AS chunks;

-- name: find_upload_key
-- The document an Idempotency-Key created, if it still exists.
-- $1 key
SELECT document_id FROM upload_keys WHERE key = $1;

-- name: insert_upload_key
-- Remember an Idempotency-Key (in the upload's own transaction); a concurrent upload with
-- the same key that committed first wins: returns nothing then.
-- $1 key, $2 document id
INSERT INTO upload_keys (key, document_id) VALUES ($1, $2)
ON CONFLICT (key) DO NOTHING
RETURNING document_id;

