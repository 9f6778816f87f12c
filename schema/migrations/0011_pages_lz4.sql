-- 0011: page texts compressed with lz4 where the server has it.
--
-- A page's text (a few kB) is over TOAST's 2 kB threshold, so PostgreSQL compresses it
-- as the parse stage writes it and decompresses it when the chunk stage reads it. pglz,
-- the default, spent ~0.17 s of PostgreSQL's CPU compressing bench.ingest's 14,361 pages
-- (perf); lz4 does the same work several times faster. Only new values are written with
-- it (existing ones stay readable as they are). A server built without lz4 keeps pglz.
DO $$
BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings
                    WHERE name = 'default_toast_compression') THEN
        ALTER TABLE pages ALTER COLUMN text SET COMPRESSION lz4;
    END IF;
END
$$;
