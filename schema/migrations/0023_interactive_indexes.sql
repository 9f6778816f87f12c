-- 0023: indexes so every interactive read is an index scan at a million documents
-- (issue 37; tests/integration/test_query_plans.py plans each one on 100,000).
--
-- `failures` lists failed jobs newest first: without this it read every failed job
-- through stage_jobs_failed and sorted them (100k failed documents: the whole set per
-- page). Walked in order, the first page stops after its LIMIT.
CREATE INDEX stage_jobs_failed_newest ON stage_jobs (finished_at DESC NULLS LAST, id)
    WHERE state = 'failed';

-- Deleting documents cascades to these by document_id, which led neither key: each
-- deleted document scanned the table (an upload key per uploaded document, a row per
-- document a model migration passed: both grow with the documents).
CREATE INDEX upload_keys_document ON upload_keys (document_id);
CREATE INDEX model_migration_documents_document ON model_migration_documents (document_id);

-- sync's planning looks up the collection's documents as large as a new file (only those
-- files are hashed): by collection alone that read the whole collection per sync.
CREATE INDEX documents_size ON documents (collection, byte_size);
