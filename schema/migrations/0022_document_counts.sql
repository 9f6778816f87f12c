-- 0022: documents counted per collection, status and source, so `status`, `/v1/stages`,
-- the web view and `collections` read a few rows instead of counting `documents` (issue
-- 37: at a million documents every such count was a scan of the table or of an index of
-- it, 0.3-1.2 s; `status`'s documents per source 0.4 s).
--
-- Maintained by statement-level triggers with transition tables: one INSERT ... ON
-- CONFLICT per statement, whatever number of rows it touched (a per-row trigger would cost
-- the hot path one upsert per document moved). A failed document is counted under the
-- stage that failed it (its `stage`), which is `status`'s failed-per-stage column; other
-- statuses are counted under stage '' so a document moving from one stage to the next
-- changes no count and the trigger writes nothing.
--
-- Contention: every worker moving documents of one collection would update the same
-- counter row and queue on its lock until commit. The rows are split into 16 slots by
-- backend (pg_backend_pid() % 16): concurrent sessions mostly write different rows, and a
-- reader sums at most 16 rows per key. Within a statement the upsert takes its rows in key
-- order, so two statements never lock the same rows in opposite orders.
CREATE TABLE document_counts (
    collection  text NOT NULL,
    status      ragline_document_status NOT NULL,
    -- The failing stage of failed documents; '' for every other status.
    stage       text NOT NULL DEFAULT '',
    -- The document's source (0: none).
    source_id   bigint NOT NULL DEFAULT 0,
    slot        smallint NOT NULL DEFAULT 0,
    n           bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (collection, status, stage, source_id, slot)
);

CREATE FUNCTION ragline_count_documents() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- One branch per event: a transition table that the event has not got cannot be named.
    IF TG_OP = 'INSERT' THEN
        INSERT INTO document_counts AS c (collection, status, stage, source_id, slot, n)
        SELECT collection, status, CASE WHEN status = 'failed' THEN coalesce(stage, '') ELSE '' END,
               coalesce(source_id, 0), pg_backend_pid() % 16, count(*)
        FROM new_rows GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (collection, status, stage, source_id, slot) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO document_counts AS c (collection, status, stage, source_id, slot, n)
        SELECT collection, status, CASE WHEN status = 'failed' THEN coalesce(stage, '') ELSE '' END,
               coalesce(source_id, 0), pg_backend_pid() % 16, -count(*)
        FROM old_rows GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (collection, status, stage, source_id, slot) DO UPDATE SET n = c.n + excluded.n;
    ELSE
        INSERT INTO document_counts AS c (collection, status, stage, source_id, slot, n)
        SELECT collection, status, stage, source_id, pg_backend_pid() % 16, sum(n)
        FROM (SELECT collection, status,
                     CASE WHEN status = 'failed' THEN coalesce(stage, '') ELSE '' END AS stage,
                     coalesce(source_id, 0) AS source_id, 1 AS n
              FROM new_rows
              UNION ALL
              SELECT collection, status,
                     CASE WHEN status = 'failed' THEN coalesce(stage, '') ELSE '' END,
                     coalesce(source_id, 0), -1
              FROM old_rows) AS moved
        GROUP BY 1, 2, 3, 4
        -- Most updates (a stage completed, a heartbeat's touch) move no document between
        -- counts: nothing to write, no row locked.
        HAVING sum(n) <> 0
        ORDER BY 1, 2, 3, 4
        ON CONFLICT (collection, status, stage, source_id, slot) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER documents_counted_insert AFTER INSERT ON documents
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ragline_count_documents();
CREATE TRIGGER documents_counted_update AFTER UPDATE ON documents
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ragline_count_documents();
CREATE TRIGGER documents_counted_delete AFTER DELETE ON documents
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION ragline_count_documents();

CREATE FUNCTION ragline_forget_document_counts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM document_counts;
    RETURN NULL;
END
$$;

-- TRUNCATE fires no DELETE trigger (benchmarks and tests empty the tables this way).
CREATE TRIGGER documents_truncated AFTER TRUNCATE ON documents
    FOR EACH STATEMENT EXECUTE FUNCTION ragline_forget_document_counts();

-- Backfill. The table is locked against writers first so no document moves between the
-- count and the triggers taking over (the migration runs in one transaction).
LOCK TABLE documents IN SHARE MODE;
INSERT INTO document_counts (collection, status, stage, source_id, n)
SELECT collection, status, CASE WHEN status = 'failed' THEN coalesce(stage, '') ELSE '' END,
       coalesce(source_id, 0), count(*)
FROM documents GROUP BY 1, 2, 3, 4;
