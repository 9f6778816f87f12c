-- Named queries of sources (0008): `ragline sync` keeps a folder or a bucket in sync.

-- name: ensure_source
-- The source with this URI, created in collection $2 when it is new; with the device its
-- folder was on at the last sync (0014).
-- $1 canonical uri, $2 collection
INSERT INTO sources (uri, collection) VALUES ($1, $2)
ON CONFLICT (uri) DO UPDATE SET uri = excluded.uri
RETURNING id, uri, collection, device, metadata::text AS metadata, readers;

-- name: find_source
-- A source by its canonical URI.
-- $1 canonical uri
SELECT id, uri, collection, device, metadata::text AS metadata, readers
FROM sources WHERE uri = $1;

-- name: lock_source
-- One sync of a source applies changes at a time: a session lock, released by
-- unlock_source or when the connection ends (a killed sync frees it).
-- $1 source id
SELECT pg_advisory_lock(hashtext('ragline.sync'), $1::int);

-- name: unlock_source
-- Release lock_source.
-- $1 source id
SELECT pg_advisory_unlock(hashtext('ragline.sync'), $1::int);

-- name: mark_synced
-- A sync of the source finished applying its plan, its folder on device $2 (NULL: a
-- bucket). A sync refused for want of evidence does not get here: the next one still
-- compares with the device the documents were last seen on.
-- $1 source id, $2 device
UPDATE sources SET synced_at = now(), device = $2 WHERE id = $1;

-- name: source_documents
-- Every document of a source with what sync compares against the files.
-- $1 source id
SELECT id, source_uri AS uri, sha256, byte_size, source_mtime_ns AS mtime_ns,
       source_etag AS etag
FROM documents WHERE source_id = $1;

-- name: insert_source_document
-- A new file of a source, pending at its first stage. Unforced since 0014: one document
-- per content in a collection, so submit and uploads find it. Nothing when the document
-- is there already: a concurrent sync created it for this URI (documents_source), or the
-- same bytes came into the collection meanwhile (documents_sha256_unforced) and the next
-- sync adopts or skips the file.
-- The document takes the source's metadata and readers (0017) as it is inserted.
-- $1 id, $2 filename, $3 media type, $4 byte size, $5 sha256, $6 asset key, $7 first stage,
-- $8 collection, $9 source id, $10 uri, $11 mtime ns, $12 etag
INSERT INTO documents (id, filename, media_type, byte_size, sha256, asset_key, forced, stage,
                       collection, source_id, source_uri, source_mtime_ns, source_etag,
                       metadata, readers)
SELECT $1, $2, $3, $4, $5, $6, false, $7, $8, $9, $10, $11, $12, s.metadata, s.readers
FROM sources AS s WHERE s.id = $9
ON CONFLICT DO NOTHING
RETURNING id;

-- name: same_size_documents
-- Documents of a collection as large as some new file of a source, with their source (if
-- any): only new files of these sizes are hashed to find one whose bytes are already a
-- document. Unforced first, then oldest: the document submit would find.
-- $1 collection, $2 sizes
SELECT d.id, d.sha256, d.byte_size, d.source_id, s.uri AS source, d.source_uri AS uri
FROM documents AS d LEFT JOIN sources AS s ON s.id = d.source_id
WHERE d.collection = $1 AND d.byte_size = ANY($2::bigint[])
ORDER BY d.forced, d.created_at, d.id;

-- name: same_bytes_documents
-- The document of a collection holding each of these contents (the unforced one: one per
-- content, the one submit finds), with its source (if any): a changed file's new bytes
-- that are already a document make it a copy (documents_sha256_unforced answers).
-- $1 collection, $2 sha256s
SELECT d.id, d.sha256, d.byte_size, d.source_id, s.uri AS source, d.source_uri AS uri
FROM documents AS d LEFT JOIN sources AS s ON s.id = d.source_id
WHERE d.collection = $1 AND d.sha256 = ANY($2::text[]) AND NOT d.forced;

-- name: adopt_document
-- A new file of a source whose bytes a document of no source holds (submitted, uploaded):
-- the file's document from now on, its stages not run again. Nothing when a source took
-- it meanwhile.
-- $1 id, $2 source id, $3 uri, $4 filename, $5 mtime ns, $6 etag
UPDATE documents
SET source_id = $2, source_uri = $3, filename = $4, source_mtime_ns = $5, source_etag = $6,
    updated_at = now()
WHERE id = $1 AND source_id IS NULL
RETURNING id;

-- name: touch_source_document
-- Same bytes, another mtime: remember it, so the next sync costs a stat again.
-- $1 id, $2 mtime ns, $3 etag
UPDATE documents SET source_mtime_ns = $2, source_etag = $3 WHERE id = $1;

-- name: move_source_document
-- Same bytes at another URI (renamed or moved): the same document, no stage runs.
-- $1 id, $2 source id, $3 new uri, $4 filename, $5 mtime ns, $6 etag
UPDATE documents
SET source_uri = $3, filename = $4, source_mtime_ns = $5, source_etag = $6,
    updated_at = now()
WHERE id = $1 AND source_id = $2
RETURNING id;

-- name: new_version
-- Changed bytes: the document's next generation, pending at the first stage. Returns
-- the new generation and the old original's key (superseded, see supersede_objects).
-- Forced only when the new bytes are another unforced document's (a file edited into a
-- copy of another stays its own document; documents_sha256_unforced allows one).
-- $1 id, $2 sha256, $3 byte size, $4 asset key, $5 mtime ns, $6 first stage, $7 etag,
-- $8 media type (detected from the new bytes)
WITH old AS (SELECT id, asset_key FROM documents WHERE id = $1 FOR UPDATE)
UPDATE documents AS d
SET sha256 = $2, byte_size = $3, asset_key = $4, source_mtime_ns = $5, source_etag = $7,
    media_type = $8, generation = d.generation + 1, status = 'pending', stage = $6, error = NULL,
    updated_at = now(),
    forced = EXISTS (SELECT 1 FROM documents AS o
                     WHERE o.collection = d.collection AND o.sha256 = $2 AND o.id <> d.id
                       AND NOT o.forced)
FROM old
WHERE d.id = old.id
RETURNING d.generation, old.asset_key AS old_key;

-- name: supersede_objects
-- The objects of the version being replaced (its original, its images): deleted once
-- generation $2 is indexed. Runs before the new version's parse rewrites assets.
-- $1 document id, $2 the new generation, $3 the old original's key
INSERT INTO superseded_objects (document_id, generation, object_key)
SELECT $1, $2, k
FROM (SELECT $3::text AS k UNION SELECT object_key FROM assets WHERE document_id = $1) AS old
WHERE k IS NOT NULL
ON CONFLICT (document_id, object_key) DO UPDATE SET generation = excluded.generation;

-- name: due_superseded_objects
-- Objects of versions that generation $2 (or an earlier one) replaced, each with whether
-- it is to be deleted: not when the current version uses it itself (same key: same
-- content). No row: nothing to delete nor forget (the index stage's usual case).
-- $1 document id, $2 the generation just indexed
SELECT s.object_key,
       s.object_key IS DISTINCT FROM (SELECT asset_key FROM documents WHERE id = $1)
       AND NOT EXISTS (SELECT 1 FROM assets AS a
                       WHERE a.document_id = $1 AND a.object_key = s.object_key) AS due
FROM superseded_objects AS s
WHERE s.document_id = $1 AND s.generation <= $2;

-- name: forget_superseded_objects
-- The objects of versions up to generation $2 are deleted.
-- $1 document id, $2 generation
DELETE FROM superseded_objects WHERE document_id = $1 AND generation <= $2;

-- name: retire_document
-- A file gone from its source: a new generation with no job, so a worker still
-- running one of the old generation's jobs commits nothing (cancel_document_jobs).
-- $1 id, $2 source id
UPDATE documents SET generation = generation + 1, updated_at = now()
WHERE id = $1 AND source_id = $2
RETURNING generation;

-- name: bury_document
-- Delete a retired document (its jobs and checkpoints cascade) and leave a tombstone.
-- $1 id, $2 source id
WITH gone AS (
    DELETE FROM documents WHERE id = $1 AND source_id = $2
    RETURNING id, source_id, source_uri, sha256
)
INSERT INTO source_tombstones (source_id, source_uri, document_id, sha256)
SELECT source_id, source_uri, id, sha256 FROM gone
ON CONFLICT (source_id, document_id) DO NOTHING
RETURNING document_id;

-- name: source_summaries
-- Per source: its collection, documents (the counts the triggers keep, 0022: counting a
-- source's rows read 900k index entries at a million documents), and tombstones of
-- deleted files (for status).
SELECT s.uri, s.collection, s.synced_at,
       (SELECT coalesce(sum(c.n), 0)::bigint FROM document_counts AS c
        WHERE c.source_id = s.id) AS documents,
       (SELECT count(*) FROM source_tombstones AS t WHERE t.source_id = s.id) AS deleted
FROM sources AS s
ORDER BY s.uri;

-- name: document_source
-- Where a document comes from, or its tombstone when the file was deleted.
-- $1 document id
SELECT s.uri AS source, d.source_uri AS uri, NULL::timestamptz AS deleted_at
FROM documents AS d JOIN sources AS s ON s.id = d.source_id
WHERE d.id = $1
UNION ALL
SELECT s.uri, t.source_uri, t.deleted_at
FROM source_tombstones AS t JOIN sources AS s ON s.id = t.source_id
WHERE t.document_id = $1;

-- name: source_unfinished
-- Documents of a source still pending or processing (a sync waits for them too, so the
-- index equals the source when it returns, also after an earlier sync was killed).
-- $1 source id
SELECT id FROM documents
WHERE source_id = $1 AND status IN ('pending', 'processing')
ORDER BY created_at, id;

-- name: label_source
-- What the source gives its documents (0017), and every document of it given the same:
-- a sync told --meta or --readers. Nothing else changes, and nothing in the index.
-- $1 source id, $2 metadata, $3 readers (NULL: every caller)
WITH labelled AS (
    UPDATE sources SET metadata = $2::jsonb, readers = $3 WHERE id = $1
    RETURNING id, metadata, readers
)
UPDATE documents AS d
SET metadata = l.metadata, readers = l.readers, updated_at = now()
FROM labelled AS l
WHERE d.source_id = l.id
  AND (d.metadata, d.readers) IS DISTINCT FROM (l.metadata, l.readers);
