-- 0015: a document's metadata, the user's key/value pairs (given at submit, upload and
-- sync, or changed later with `ragline metadata`). Search filters on it in PostgreSQL,
-- which answers every filter, so changing it writes nothing to the index and embeds
-- nothing. The GIN index serves containment (metadata @> '{"team": "docs"}').
ALTER TABLE documents ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb
    CONSTRAINT documents_metadata_object CHECK (jsonb_typeof(metadata) = 'object');
CREATE INDEX documents_metadata ON documents USING gin (metadata jsonb_path_ops);
