-- 0006: chunks sized in the embedder's tokens.
--
-- tokens: the chunk's exact length in the configured embedder's tokens when it was cut
-- (NULL for chunks written before this migration, and for image chunks).
-- over_window: the chunk was longer than the embedder's window, so the model never read
-- its tail (expected never; `status` counts them through the partial index).

ALTER TABLE chunks ADD COLUMN tokens integer CHECK (tokens >= 0);
ALTER TABLE chunks ADD COLUMN over_window boolean NOT NULL DEFAULT false;

CREATE INDEX chunks_over_window ON chunks (document_id) WHERE over_window;
