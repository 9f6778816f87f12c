-- 0013: an upload's Idempotency-Key remembers the request it answered.
--
-- A key reused with other bytes or for another collection is refused (422, as the IETF
-- idempotency-key draft says) instead of answering with the first document and dropping
-- the new bytes. The key keeps the request's content hash and collection. Nullable: rows
-- from before this migration (or written by a server of the previous version during a
-- rolling deploy) fall back to their document's own hash and collection, which are the
-- same for every upload that created or found it.
ALTER TABLE upload_keys ADD COLUMN sha256 text, ADD COLUMN collection text;
