-- 0003: embedding vectors as float32 bytes instead of real[].
--
-- A real[] travels as one length-prefixed value per number, and asyncpg checks every
-- number of it in Python on the way in; bytes are one copy each way (numpy on the
-- client). Big-endian, as float4send writes them, so existing rows convert in SQL.

ALTER TABLE embeddings ADD COLUMN data bytea;

UPDATE embeddings
SET data = (
    SELECT string_agg(float4send(u.x), ''::bytea ORDER BY u.i)
    FROM unnest(vector) WITH ORDINALITY AS u (x, i)
);

ALTER TABLE embeddings DROP COLUMN vector;
ALTER TABLE embeddings RENAME COLUMN data TO vector;
ALTER TABLE embeddings ALTER COLUMN vector SET NOT NULL;
ALTER TABLE embeddings
    ADD CONSTRAINT embeddings_vector_size CHECK (octet_length(vector) = 4 * dimensions);
