-- 0010: find a document's image chunks without reading its text chunks.
--
-- The vision stage replaces a document's image chunks (DELETE ... WHERE kind = 'image'),
-- which walked every chunk row of the document through the primary key, dead versions
-- included: on a table bloated by re-runs, 8.7 ms a document (1.7 s of PostgreSQL for
-- 200 documents that had no image at all). The partial index holds image chunks only,
-- so it costs nothing on text chunks and the delete reads only what it deletes.
-- Building it reads the chunks table once, holding off writes to it meanwhile.

CREATE INDEX chunks_images ON chunks (document_id) WHERE kind = 'image';
