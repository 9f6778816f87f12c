-- Named queries of the HTTP API (`serve`): pages of documents, counts, upload keys.

-- name: documents_page
-- Documents newest first, filtered, after a cursor (the last row of the previous page),
-- only those the caller may read (no readers, or one of its principals among them).
-- $1 status (NULL: any), $2 stage (NULL: any), $3 cursor created_at (NULL: first page),
-- $4 cursor id, $5 limit, $6 the caller's principals (NULL: may read everything)
SELECT id, filename, media_type, byte_size, sha256, asset_key, status::text AS status, stage,
       error, generation, created_at, updated_at
FROM documents
WHERE ($1::text IS NULL OR status = $1::ragline_document_status)
  AND ($2::text IS NULL OR stage = $2)
  AND ($3::timestamptz IS NULL OR (created_at, id) < ($3, $4::uuid))
  AND ($6::text[] IS NULL OR readers IS NULL OR readers && $6)
ORDER BY created_at DESC, id DESC
LIMIT $5;

-- name: find_readable_copy
-- A document holding these bytes in a collection that the caller may read (forced
-- copies too), the unforced one first.
-- $1 sha256, $2 collection, $3 the caller's principals
SELECT id FROM documents
WHERE sha256 = $1 AND collection = $2 AND (readers IS NULL OR readers && $3::text[])
ORDER BY forced, created_at
LIMIT 1;

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
-- The document an Idempotency-Key created or found, if it still exists, and the request
-- it answered: the content hash and collection (its document's on rows from before 0013).
-- $1 key
SELECT k.document_id, coalesce(k.sha256, d.sha256) AS sha256,
       coalesce(k.collection, d.collection) AS collection
FROM upload_keys k JOIN documents d ON d.id = k.document_id
WHERE k.key = $1;

-- name: insert_upload_key
-- Remember an Idempotency-Key and its request (in the upload's own transaction); a
-- concurrent upload with the same key that committed first wins: returns nothing then.
-- $1 key, $2 document id, $3 content sha256, $4 collection
INSERT INTO upload_keys (key, document_id, sha256, collection) VALUES ($1, $2, $3, $4)
ON CONFLICT (key) DO NOTHING
RETURNING document_id;

-- name: chunk_window
-- A document's chunks from one ordinal to another, in order (a hit and its neighbours).
-- $1 document id, $2 first ordinal, $3 last ordinal
SELECT ordinal, kind::text AS kind, text, page_start, page_end, section
FROM chunks
WHERE document_id = $1 AND ordinal BETWEEN $2 AND $3
ORDER BY ordinal;

-- name: page_text
-- A document's text on one page (a section, for formats without pages).
-- $1 document id, $2 page
SELECT page, text, section FROM pages WHERE document_id = $1 AND page = $2;

-- name: page_count
-- How many pages a document's parse wrote.
-- $1 document id
SELECT count(*) FROM pages WHERE document_id = $1;

-- name: chunk_boxes
-- Where a chunk's text sits, and the document's original to render it from (the web
-- view's highlighted page). No row: no such chunk.
-- $1 document id, $2 chunk ordinal
SELECT c.boxes, d.asset_key, d.media_type, c.generation
FROM chunks AS c JOIN documents AS d ON d.id = c.document_id
WHERE c.document_id = $1 AND c.ordinal = $2;
