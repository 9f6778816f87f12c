-- Named queries of the pipeline's checkpoint tables (pages, assets, chunks, embeddings).
-- Writers run inside the engine's completion transaction; readers use the pool.

-- name: delete_pages
-- Forget a document's pages before writing a new parse.
-- $1 document id
DELETE FROM pages WHERE document_id = $1;

-- name: insert_pages
-- A document's text per page.
-- $1 document id, $2 page numbers, $3 texts, $4 section labels (NULL: a page of a PDF),
-- $5 layouts (NULL: not a PDF's page)
INSERT INTO pages (document_id, page, text, section, layout)
SELECT $1, p, t, s, l FROM unnest($2::int[], $3::text[], $4::text[], $5::bytea[])
    AS u (p, t, s, l);

-- name: document_pages
-- A document's pages in order.
-- $1 document id
SELECT page, text, section, layout FROM pages WHERE document_id = $1 ORDER BY page;

-- name: delete_assets_except
-- Drop images a new parse no longer found (descriptions of the rest are kept).
-- $1 document id, $2 sha256s that stay
DELETE FROM assets WHERE document_id = $1 AND NOT (sha256 = ANY($2::text[]));

-- name: upsert_assets
-- Images a parse found; an image already described keeps its description.
-- $1 document id, $2 sha256s, $3 object keys, $4 media types, $5 sizes, $6 pages,
-- $7 widths, $8 heights
INSERT INTO assets (document_id, sha256, object_key, media_type, byte_size, page, width, height)
SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::int[],
                         $7::int[], $8::int[])
ON CONFLICT (document_id, sha256) DO UPDATE
SET object_key = excluded.object_key, media_type = excluded.media_type,
    byte_size = excluded.byte_size, page = excluded.page, width = excluded.width,
    height = excluded.height;

-- name: document_assets
-- A document's images, first page first.
-- $1 document id
SELECT sha256, object_key, media_type, byte_size, page, width, height, description
FROM assets WHERE document_id = $1 ORDER BY page, sha256;

-- name: describe_asset
-- Per-image checkpoint of the vision stage.
-- $1 document id, $2 sha256, $3 description, $4 the vision model that wrote it
UPDATE assets SET description = $3, described_at = now(), described_by = $4
WHERE document_id = $1 AND sha256 = $2;

-- name: reuse_descriptions
-- The vision stage's shortcut: descriptions of the same bytes by the same model, from any
-- document, copied onto this document's undescribed images. Returns the images copied.
-- $1 document id, $2 the vision model
UPDATE assets AS mine SET description = theirs.description, described_at = now(),
       described_by = $2
FROM (SELECT DISTINCT ON (a.sha256) a.sha256, a.description
      FROM assets a
      WHERE a.sha256 IN (SELECT sha256 FROM assets
                         WHERE document_id = $1 AND description IS NULL)
        AND a.described_by = $2 AND a.description IS NOT NULL
      ORDER BY a.sha256, a.described_at DESC) AS theirs
WHERE mine.document_id = $1 AND mine.sha256 = theirs.sha256 AND mine.description IS NULL
RETURNING mine.sha256;

-- name: delete_chunks
-- Forget all of a document's chunks (a new chunk run replaces text and image chunks;
-- vision then adds the image chunks again).
-- $1 document id
DELETE FROM chunks WHERE document_id = $1;

-- name: delete_image_chunks
-- Forget a document's image chunks before vision writes them again.
-- $1 document id
DELETE FROM chunks WHERE document_id = $1 AND kind = 'image';

-- name: next_chunk_ordinal
-- Image chunks are numbered after the text chunks.
-- $1 document id
SELECT coalesce(max(ordinal) + 1, 0) FROM chunks WHERE document_id = $1 AND kind = 'text';

-- name: chunks_over_window
-- Chunks longer than the embedder's window (their tail was never embedded), in how many
-- documents; of one document, or of all (the partial index keeps this cheap).
-- $1 document id (NULL: all documents)
SELECT count(*) AS chunks, count(DISTINCT document_id) AS documents
FROM chunks WHERE over_window AND ($1::uuid IS NULL OR document_id = $1);

-- name: document_chunk_tokens
-- A document's text chunks: how many, their largest and total token counts.
-- $1 document id
SELECT count(*) AS chunks, max(tokens) AS max_tokens, sum(tokens)::bigint AS tokens,
       count(*) FILTER (WHERE over_window) AS over_window
FROM chunks WHERE document_id = $1 AND kind = 'text';

-- name: document_chunks
-- A document's chunks in order.
-- $1 document id
SELECT ordinal, kind::text AS kind, text, page_start, page_end, sha256, generation
FROM chunks WHERE document_id = $1 ORDER BY ordinal;

-- name: chunk_ordinals_of
-- The chunk ordinals of a page of documents (verify: the points each one should have).
-- $1 document ids
SELECT document_id, ordinal FROM chunks WHERE document_id = ANY($1::uuid[]);

-- name: asset_keys_of
-- The stored images of a page of documents (verify: each must exist in the store).
-- $1 document ids
SELECT document_id, object_key FROM assets WHERE document_id = ANY($1::uuid[]);

-- name: document_texts_to_embed
-- The embed stage's one read: a document's chunks in order, each with its text only where
-- this model has no vector for it yet (a cache hit ships its sha256 alone).
-- $1 document id, $2 model
-- A key lookup per chunk, as a scalar subquery: a join, or EXISTS (planned as a hashed
-- subplan), reads every vector of the model per document (measured: 4-9x the backend CPU
-- of the two queries this replaced). The same text twice is deduplicated by the caller,
-- not by a sort of every text here.
SELECT c.sha256,
       CASE WHEN (SELECT true FROM embeddings AS e WHERE e.model = $2 AND e.sha256 = c.sha256)
            THEN NULL ELSE c.text END AS text
FROM chunks AS c
WHERE c.document_id = $1
ORDER BY c.ordinal;

-- name: insert_embeddings
-- A batch of vectors into the content-addressed cache; a concurrent writer's copy wins.
-- $1 model, $2 sha256s, $3 dimensions, $4 the vectors (float32 big-endian bytes each)
INSERT INTO embeddings (model, sha256, dimensions, vector)
SELECT $1, u.sha256, $3, u.vector
FROM unnest($2::text[], $4::bytea[]) AS u (sha256, vector)
ON CONFLICT (model, sha256) DO NOTHING;

-- name: chunk_vectors
-- A document's chunks with their vectors for one model (NULL where not embedded), in
-- ordinal order: all of them, or a slice (the index stage streams long documents).
-- $1 document id, $2 model, $3 only ordinals above this (-1: from the first),
-- $4 at most this many (NULL: all), $5 with the stored keyword vectors
-- A key lookup per chunk: as a join, a generic plan may hash the whole embeddings table.
-- The slice is a range of the primary key (document_id, ordinal).
SELECT c.ordinal, c.kind::text AS kind, c.text, c.page_start, c.page_end, c.generation,
       c.section, c.is_table, CASE WHEN $5::boolean THEN c.keywords END AS keywords,
       (SELECT e.vector FROM embeddings AS e WHERE e.model = $2 AND e.sha256 = c.sha256)
           AS vector
FROM chunks AS c
WHERE c.document_id = $1 AND c.ordinal > $3::integer
ORDER BY c.ordinal
LIMIT $4::integer;

-- name: documents_missing_model
-- Documents with at least one chunk that has no vector for this model.
-- $1 model
SELECT DISTINCT c.document_id AS id
FROM chunks AS c
LEFT JOIN embeddings AS e ON e.model = $1 AND e.sha256 = c.sha256
WHERE e.sha256 IS NULL;

-- name: mark_indexed
-- In the index job's commit: the points of this generation now answer search.
-- $1 document id, $2 generation
UPDATE documents SET indexed_generation = $2 WHERE id = $1;
