-- 0021: an image described once is not described again. The vision stage looks up
-- descriptions of the same bytes (sha256) made by the same vision model in any document
-- (issue 38: 8 of the corpus slice's 238 images repeat across manuals). described_by
-- names the model that wrote a description; rows from before stay NULL and are not reused.
ALTER TABLE assets ADD COLUMN described_by text;
CREATE INDEX assets_described ON assets (sha256, described_by) WHERE description IS NOT NULL;
