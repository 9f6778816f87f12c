-- 0014: sync asks for evidence before deleting (issue 39), and one file is one document
-- per collection however it came in.
--
-- A source remembers the device its folder was on at its last sync (st_dev of the root;
-- NULL for a bucket, or before the first sync since this migration). A folder that is
-- now on another device is a disk unmounted under it (or mounted elsewhere): its listing
-- is no evidence that the files were deleted, and sync refuses to delete most of the
-- source's documents on it without --allow-deletes.
ALTER TABLE sources ADD COLUMN device bigint;

-- A source's documents were inserted forced (matched by URI, never by bytes), so submit
-- and uploads never found them and made a second document of the same file. Sync now
-- keeps one document per content in a collection and inserts unforced; here the first
-- synced document of each content that no unforced document holds yet becomes unforced.
-- Further synced documents of the same content stay as they are (forced); none are made now.
UPDATE documents SET forced = false
WHERE id IN (
    SELECT DISTINCT ON (s.collection, s.sha256) s.id
    FROM documents AS s
    WHERE s.source_id IS NOT NULL AND s.forced
      AND NOT EXISTS (SELECT 1 FROM documents AS u
                      WHERE u.collection = s.collection AND u.sha256 = s.sha256
                        AND NOT u.forced)
    ORDER BY s.collection, s.sha256, s.created_at, s.id
);
