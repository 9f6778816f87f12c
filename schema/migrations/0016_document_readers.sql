-- 0016: who may read a document (security trimming). NULL: every caller (documents
-- submitted before, or without --readers); else the principals whose callers may see it
-- in search, document reads, events and the web view. An API token maps to principals
-- (RAGLINE_API_TOKENS=token:alice+team-docs); a token without principals sees all.
-- Search checks it in PostgreSQL with the hits, so a change writes nothing to the index.
ALTER TABLE documents ADD COLUMN readers text[]
    CONSTRAINT documents_readers_named CHECK (array_position(readers, NULL) IS NULL);
CREATE INDEX documents_readers ON documents USING gin (readers) WHERE readers IS NOT NULL;
