-- 0017: what a sync source gives its documents: metadata and readers (`sync SOURCE --meta
-- K=V --readers a,b`). A new file's document takes them as it is inserted; a sync given
-- them sets them on every document of the source. NULL readers: every caller.
ALTER TABLE sources
    ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN readers text[];
