-- 0012: the generation whose points answer search.
--
-- Search reads its hits' documents from PostgreSQL (the current name and source URI,
-- and whether the point still counts). A point counts when its generation is the one
-- the document's last successful index job wrote: the document's own generation once it
-- is ready, the previous one while a new version is on its way (a synced file changed:
-- its old points serve until the new ones replace them), none once it failed or is
-- gone. The index stage sets it in its own commit.
ALTER TABLE documents ADD COLUMN indexed_generation integer;
UPDATE documents SET indexed_generation = generation WHERE status = 'ready';
