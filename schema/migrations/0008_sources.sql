-- 0008: sources. A document may come from a source — a folder or an S3 bucket and prefix
-- kept in sync by `ragline sync` — and then has a URI inside it (a path relative to the
-- folder, or the object key), its content hash (documents.sha256) and the size and mtime
-- last seen, so an unchanged file costs a stat and no read.
--
-- Changed bytes are a new version of the SAME document (a new generation from parse);
-- the objects the old version stored wait in superseded_objects until a newer generation
-- is indexed, then go. A file gone from its source leaves a tombstone (for `status`);
-- its document, points and objects are removed.

CREATE TABLE sources (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Canonical: an absolute folder path, or s3://bucket/prefix.
    uri         text NOT NULL UNIQUE,
    -- Every document of a source is in this collection.
    collection  text NOT NULL DEFAULT 'default'
                CONSTRAINT sources_collection_name CHECK (collection ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    synced_at   timestamptz
);

ALTER TABLE documents
    ADD COLUMN source_id bigint REFERENCES sources (id),
    ADD COLUMN source_uri text,
    -- Last modification time seen, in ns (files: st_mtime_ns; objects: Last-Modified).
    ADD COLUMN source_mtime_ns bigint,
    -- Objects: the ETag the listing gave (Last-Modified has whole seconds; files: NULL).
    ADD COLUMN source_etag text,
    ADD CONSTRAINT documents_source_uri CHECK ((source_id IS NULL) = (source_uri IS NULL));

-- One live document per file of a source: two syncs at once cannot both create it.
CREATE UNIQUE INDEX documents_source ON documents (source_id, source_uri)
    WHERE source_id IS NOT NULL;

-- Objects (originals, images) of a document's older versions: deleted once generation
-- `generation` (the version that replaced them) or a later one is indexed. An object a
-- newer version still uses is kept (same key: same content).
CREATE TABLE superseded_objects (
    document_id  uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    generation   integer NOT NULL,
    object_key   text NOT NULL,
    PRIMARY KEY (document_id, object_key)
);

-- A file deleted from its source: its document is gone; this row stays for `status`.
CREATE TABLE source_tombstones (
    source_id    bigint NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    source_uri   text NOT NULL,
    document_id  uuid NOT NULL,
    sha256       text NOT NULL,
    deleted_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, document_id)
);
