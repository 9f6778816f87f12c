-- Named queries of search: the hits as PostgreSQL has them, and every filter.

-- name: candidate_documents
-- The documents a filtered search may answer from: searchable (an index job has written
-- their points) and matching every filter given (NULL: no filter). A document's date is
-- its file's modification time where sync saw one, else when it was submitted.
-- $1 collection, $2 document ids, $3 source uri, $4 path prefix (of the path or key in
-- the source, else the file name), $5 media types, $6 from date, $7 to date (exclusive),
-- $8 metadata every key/value of which the document's must hold, $9 the caller's
-- principals (NULL: a caller who may read everything)
SELECT d.id
FROM documents AS d
LEFT JOIN sources AS s ON s.id = d.source_id
WHERE d.indexed_generation IS NOT NULL
  AND d.status <> 'failed'
  AND ($1::text IS NULL OR d.collection = $1)
  AND ($2::uuid[] IS NULL OR d.id = ANY ($2))
  AND ($3::text IS NULL OR s.uri = $3)
  AND ($4::text IS NULL OR starts_with(coalesce(d.source_uri, d.filename), $4))
  AND ($5::text[] IS NULL OR d.media_type = ANY ($5))
  AND ($6::timestamptz IS NULL OR coalesce(
        to_timestamp(d.source_mtime_ns / 1e9), d.created_at) >= $6)
  AND ($7::timestamptz IS NULL OR coalesce(
        to_timestamp(d.source_mtime_ns / 1e9), d.created_at) < $7)
  AND ($8::jsonb IS NULL OR d.metadata @> $8)
  AND ($9::text[] IS NULL OR d.readers IS NULL OR d.readers && $9);

-- name: answer_rows
-- Search hits as PostgreSQL has them now, one row per hit that still counts, in the
-- order given: the point is of the generation that answers search for a document that
-- exists and has not failed. The document's current name, source URI, collection and
-- metadata; the chunk's row when it is the one the point was built from (chunked at or
-- before the point's generation; a newer chunking waits for its own index job). With
-- the chunk filters, only chunks of those pages (any overlap) and of sections whose
-- label starts with $5 (case-insensitive).
-- $1 document ids, $2 ordinals, $3 generations (of the hits, in rank order),
-- $4 first page, $5 last page, $6 section label prefix, $7 the caller's principals
-- (NULL: may read everything; else only documents with no readers or one of them)
SELECT h.i::integer AS rank, d.id AS document_id, h.ordinal, h.generation, d.filename,
       d.source_uri, d.collection, d.media_type, d.metadata, c.kind::text AS kind,
       c.page_start, c.page_end, c.section, c.text, c.boxes, c.is_table
FROM unnest($1::uuid[], $2::integer[], $3::integer[])
         WITH ORDINALITY AS h (document_id, ordinal, generation, i)
JOIN documents AS d
  ON d.id = h.document_id AND d.indexed_generation = h.generation AND d.status <> 'failed'
LEFT JOIN chunks AS c
  ON c.document_id = h.document_id AND c.ordinal = h.ordinal AND c.generation <= h.generation
WHERE ($4::integer IS NULL OR c.page_end >= $4)
  AND ($5::integer IS NULL OR c.page_start <= $5)
  AND ($6::text IS NULL OR starts_with(lower(c.section), lower($6)))
  AND ($7::text[] IS NULL OR d.readers IS NULL OR d.readers && $7)
ORDER BY h.i;

-- name: set_metadata
-- Merge key/values into documents' metadata (a JSON null removes its key); with $3,
-- replace it whole. Nothing else changes: the index holds no metadata.
-- $1 document ids, $2 key/values, $3 replace, $4 only documents of this collection
UPDATE documents
SET metadata = jsonb_strip_nulls(CASE WHEN $3 THEN $2::jsonb ELSE metadata || $2::jsonb END),
    updated_at = now()
WHERE id = ANY ($1::uuid[]) AND ($4::text IS NULL OR collection = $4)
RETURNING id, metadata;


-- name: set_readers
-- Who may read documents (NULL: every caller). Nothing else changes.
-- $1 document ids, $2 principals or NULL, $3 only documents of this collection
UPDATE documents SET readers = $2, updated_at = now()
WHERE id = ANY ($1::uuid[]) AND ($3::text IS NULL OR collection = $3)
RETURNING id, readers;

-- name: about_documents
-- Documents' metadata and readers.
-- $1 document ids, $2 only documents of this collection
SELECT id, metadata, readers FROM documents
WHERE id = ANY ($1::uuid[]) AND ($2::text IS NULL OR collection = $2);
