-- 0025: the CLI takes a document's file name where it takes an id (`delete`, `reprocess`,
-- `metadata`, `retry`, `status DOC`) when the name is one live document's; the lookup
-- by name is an index scan at a million documents (tests/integration/test_query_plans.py).
CREATE INDEX documents_filename ON documents (filename, collection);
