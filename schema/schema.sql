-- The full current schema of ragline, for reading and for the migration test.
-- Generated from schema/migrations/ (0001 to 0009); tests/migration checks they agree.
-- Never apply this to a live database: use `python -m runtime migrate`.


CREATE TYPE ragline_document_status AS ENUM ('pending', 'processing', 'ready', 'failed');
CREATE TYPE ragline_job_state AS ENUM ('queued', 'running', 'succeeded', 'failed', 'cancelled');

CREATE TABLE documents (
    id          uuid PRIMARY KEY,
    filename    text NOT NULL,
    media_type  text NOT NULL,
    byte_size   bigint NOT NULL CHECK (byte_size >= 0),
    sha256      text NOT NULL,
    asset_key   text,
    -- A forced submission may repeat content already present; only unforced ones dedupe.
    forced      boolean NOT NULL DEFAULT false,
    status      ragline_document_status NOT NULL DEFAULT 'pending',
    stage       text,
    error       text,
    generation  integer NOT NULL DEFAULT 1 CHECK (generation > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- The collection (tenant) the document belongs to; search, delete, verify,
    -- reprocess and status take one.
    collection  text NOT NULL DEFAULT 'default'
                CONSTRAINT documents_collection_name
                CHECK (collection ~ '^[a-z0-9][a-z0-9_-]{0,62}$')
);

-- Same bytes submitted twice to one collection are the same document unless the
-- submitter forces a copy.
CREATE UNIQUE INDEX documents_sha256_unforced ON documents (collection, sha256) WHERE NOT forced;
CREATE INDEX documents_status ON documents (status);
CREATE INDEX documents_collection ON documents (collection, status);
-- Newest first (0020): the documents list walks it instead of sorting the table.
CREATE INDEX documents_newest ON documents (created_at DESC, id DESC);

CREATE TABLE stage_jobs (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id       uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    stage             text NOT NULL,
    generation        integer NOT NULL,
    state             ragline_job_state NOT NULL DEFAULT 'queued',
    attempts          integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts      integer NOT NULL DEFAULT 3 CHECK (max_attempts > 0),
    -- How many attempts ended with the worker gone (lease expired).
    lost              integer NOT NULL DEFAULT 0 CHECK (lost >= 0),
    priority          integer NOT NULL DEFAULT 0,
    run_after         timestamptz NOT NULL DEFAULT now(),
    lease_owner       text,
    lease_token       uuid,
    lease_expires_at  timestamptz,
    last_error        text,
    error_kind        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz,
    -- When the job's current run of transient failures began (NULL: none since it last
    -- made progress); transient faults retry until RAGLINE_RETRY_FOR has passed.
    transient_since   timestamptz,
    -- Transient failures since then: the exponent of the job's backoff.
    transient_failures integer NOT NULL DEFAULT 0 CHECK (transient_failures >= 0),
    -- The W3C traceparent of the document's trace (NULL: untraced); the next stage's job
    -- copies it (0018, docs/tracing.md).
    trace_context     text,
    CHECK (state <> 'running' OR (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- At most one live job per (document, stage): re-enqueueing is idempotent.
CREATE UNIQUE INDEX stage_jobs_live ON stage_jobs (document_id, stage)
    WHERE state IN ('queued', 'running');

-- The claim walks this in order; finished rows are not in it, so a claim stays
-- O(log n) however many succeeded/failed rows pile up.
CREATE INDEX stage_jobs_claim ON stage_jobs (stage, priority DESC, run_after, id)
    WHERE state = 'queued';

-- The rescuer's sweep: only running rows, ordered by expiry.
CREATE INDEX stage_jobs_expiry ON stage_jobs (lease_expires_at) WHERE state = 'running';

CREATE INDEX stage_jobs_document ON stage_jobs (document_id, stage);

-- Failed jobs, for `failures` and `retry`.
CREATE INDEX stage_jobs_failed ON stage_jobs (stage, error_kind) WHERE state = 'failed';

-- Worker processes, for status ("no live worker serves that stage").
CREATE TABLE workers (
    id            text PRIMARY KEY,
    stages        text[] NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now()
);


-- parse: text per page.
CREATE TABLE pages (
    document_id  uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    page         integer NOT NULL CHECK (page >= 1),
    text         text NOT NULL,
    -- Formats without pages: the section's heading path or line range (page counts the
    -- sections); reflowable books: the page's chapter. NULL for PDFs.
    section      text,
    -- PDFs: the page's blocks, boxes, outline headings and table rows (msgpack of
    -- stages.parsing.formats.unit.Layout; 0019); NULL for other formats.
    layout       bytea,
    PRIMARY KEY (document_id, page)
);

-- Page texts are over TOAST's threshold: lz4 compresses them faster than pglz (0011).
DO $$
BEGIN
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings
                    WHERE name = 'default_toast_compression') THEN
        ALTER TABLE pages ALTER COLUMN text SET COMPRESSION lz4;
    END IF;
END
$$;

-- parse: images pulled out of the PDF (deduplicated per document by content hash);
-- vision fills in the description, one image at a time.
CREATE TABLE assets (
    document_id  uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    sha256       text NOT NULL,
    object_key   text NOT NULL,
    media_type   text NOT NULL,
    byte_size    bigint NOT NULL,
    page         integer NOT NULL,
    width        integer NOT NULL,
    height       integer NOT NULL,
    description  text,
    described_at timestamptz,
    -- The vision model that wrote description (0021); NULL before it, never reused.
    described_by text,
    PRIMARY KEY (document_id, sha256)
);

-- Same bytes, same model: described once (0021).
CREATE INDEX assets_described ON assets (sha256, described_by) WHERE description IS NOT NULL;

CREATE TYPE ragline_chunk_kind AS ENUM ('text', 'image');

-- chunk (kind text) and vision (kind image).
CREATE TABLE chunks (
    document_id  uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    ordinal      integer NOT NULL CHECK (ordinal >= 0),
    kind         ragline_chunk_kind NOT NULL,
    text         text NOT NULL,
    page_start   integer NOT NULL,
    page_end     integer NOT NULL,
    sha256       text NOT NULL,
    generation   integer NOT NULL,
    -- Exact length in the embedder's tokens when cut (NULL: image chunks, older rows).
    tokens       integer CHECK (tokens >= 0),
    -- Longer than the embedder's window: its tail was never embedded (expected never).
    over_window  boolean NOT NULL DEFAULT false,
    -- Its section label (the heading paths it spans), NULL where there is none.
    section      text,
    -- PDFs: where its text sits, (page, x0, y0, x1, y1) in points from the page's top
    -- left, five reals a rectangle (0019).
    boxes        real[],
    -- A piece of a table, its header row first (0019).
    is_table     boolean NOT NULL DEFAULT false,
    -- Its keyword vector (stages.text.keywords.stored_vector), NULL: computed when
    -- indexed (0024).
    keywords     bytea,
    PRIMARY KEY (document_id, ordinal),
    CHECK (page_end >= page_start)
);

CREATE INDEX chunks_over_window ON chunks (document_id) WHERE over_window;
-- Image chunks only (0010): vision replaces them without reading the text chunks.
CREATE INDEX chunks_images ON chunks (document_id) WHERE kind = 'image';

-- embed: content-addressed cache, model + sha256(text) -> vector. Shared by documents,
-- so re-embedding unchanged text is free and re-indexing needs no embedding call.
CREATE TABLE embeddings (
    model       text NOT NULL,
    sha256      text NOT NULL,
    dimensions  integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- float32, big-endian (float4send's order), dimensions * 4 bytes.
    vector      bytea NOT NULL,
    PRIMARY KEY (model, sha256),
    CONSTRAINT embeddings_vector_size CHECK (octet_length(vector) = 4 * dimensions)
);

-- Providers (0004): one row per external provider and model, shared by every worker
-- process: its circuit and its request and token budgets (GCRA clocks), plus a
-- fleet-wide pause from a 429's Retry-After.
CREATE TABLE providers (
    name           text PRIMARY KEY,
    -- The pipeline stages whose jobs call this provider (registered by workers at start).
    stages         text[] NOT NULL DEFAULT '{}',
    state          text NOT NULL DEFAULT 'closed'
                   CHECK (state IN ('closed', 'open', 'half_open')),
    -- Consecutive transient failures, across all processes; any success resets it.
    failures       integer NOT NULL DEFAULT 0 CHECK (failures >= 0),
    -- First failure of the current run of failures (what `status` calls "since").
    failing_since  timestamptz,
    last_error     text,
    -- Failed probes since the circuit opened: the probe interval doubles with each.
    probes         integer NOT NULL DEFAULT 0 CHECK (probes >= 0),
    -- Open: when the next probe may go. Half-open: when the probe in flight is given up.
    next_probe_at  timestamptz,
    probe_owner    text,
    -- GCRA: the earliest time the next request / the next token may be sent.
    request_at     timestamptz NOT NULL DEFAULT '-infinity',
    token_at       timestamptz NOT NULL DEFAULT '-infinity',
    -- A 429's Retry-After: nobody calls the provider before this.
    paused_until   timestamptz NOT NULL DEFAULT '-infinity',
    changed_at     timestamptz NOT NULL DEFAULT now()
);

-- serve (0005): document events while a server listens, upload idempotency keys.
CREATE TABLE event_listeners (
    id            text PRIMARY KEY,
    last_seen_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per document state change while a server listens; the stream's event ids
-- (Last-Event-ID resumes after one). No foreign key: a deleted document keeps its
-- 'deleted' event. Pruned by the servers (older than their retention).
CREATE TABLE document_events (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    document_id  uuid NOT NULL,
    -- the document's status, or 'deleted'
    status       text NOT NULL,
    stage        text,
    error        text,
    filename     text NOT NULL,
    generation   integer NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX document_events_at ON document_events (at);

-- Idempotency-Key of an upload -> the document it created or found (same transaction),
-- and the request it answered: a reuse with other bytes or another collection is a 422.
CREATE TABLE upload_keys (
    key          text PRIMARY KEY,
    document_id  uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- NULL on rows from before 0013: their document's sha256 and collection stand in
    sha256       text,
    collection   text
);

CREATE FUNCTION ragline_document_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    doc documents;
    new_status text;
    event_id bigint;
BEGIN
    -- now() is the transaction's start: a listener seen 30 s before it began counts.
    IF NOT EXISTS (
        SELECT 1 FROM event_listeners WHERE last_seen_at > now() - interval '30 seconds'
    ) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        doc := OLD;
        new_status := 'deleted';
    ELSE
        doc := NEW;
        new_status := NEW.status::text;
    END IF;
    INSERT INTO document_events (document_id, status, stage, error, filename, generation)
    VALUES (doc.id, new_status, doc.stage, left(doc.error, 1000), left(doc.filename, 1000),
            doc.generation)
    RETURNING id INTO event_id;
    -- The payload is the event itself (under NOTIFY's 8000-byte limit: error and
    -- filename are cut to 1000 characters), so a listener needs no read per event.
    PERFORM pg_notify('ragline_events', json_build_object(
        'id', event_id, 'document_id', doc.id, 'status', new_status, 'stage', doc.stage,
        'error', left(doc.error, 1000), 'filename', left(doc.filename, 1000),
        'generation', doc.generation)::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER documents_created_or_deleted AFTER INSERT OR DELETE ON documents
    FOR EACH ROW EXECUTE FUNCTION ragline_document_event();

-- Only real changes: complete_and_claim and reprocess set these columns every time.
CREATE TRIGGER documents_changed AFTER UPDATE ON documents
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.stage IS DISTINCT FROM NEW.stage
          OR OLD.generation IS DISTINCT FROM NEW.generation)
    EXECUTE FUNCTION ragline_document_event();

-- The live vector collection per alias: the embedding model that answers search and the
-- physical collection holding its points (Qdrant also keeps a real alias of that name).
CREATE TABLE vector_aliases (
    alias       text PRIMARY KEY,
    model       text NOT NULL,
    dimensions  integer NOT NULL CHECK (dimensions > 0),
    collection  text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A switch of embedding model: a new physical collection is filled while search answers
-- from the old one; the alias moves only when every ready document is in the new one.
CREATE TABLE model_migrations (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alias            text NOT NULL,
    from_model       text NOT NULL,
    from_collection  text NOT NULL,
    to_model         text NOT NULL,
    to_dimensions    integer NOT NULL CHECK (to_dimensions > 0),
    to_collection    text NOT NULL,
    state            text NOT NULL DEFAULT 'building'
                     CHECK (state IN ('building', 'swapped', 'done', 'cancelled')),
    started_at       timestamptz NOT NULL DEFAULT now(),
    swapped_at       timestamptz,
    finished_at      timestamptz
);

-- At most one unfinished migration per alias.
CREATE UNIQUE INDEX model_migrations_one_open ON model_migrations (alias)
    WHERE state IN ('building', 'swapped');

-- Documents (at a generation) a migration already has in its new collection.
CREATE TABLE model_migration_documents (
    migration_id  bigint NOT NULL REFERENCES model_migrations (id) ON DELETE CASCADE,
    document_id   uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    generation    integer NOT NULL,
    points        integer NOT NULL CHECK (points >= 0),
    migrated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (migration_id, document_id)
);

-- Sources (0008): documents kept in sync with a folder or a bucket by `ragline sync`.
CREATE TABLE sources (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- Canonical: an absolute folder path, or s3://bucket/prefix.
    uri         text NOT NULL UNIQUE,
    -- Every document of a source is in this collection.
    collection  text NOT NULL DEFAULT 'default'
                CONSTRAINT sources_collection_name CHECK (collection ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    synced_at   timestamptz,
    -- 0014: the device (st_dev) of the folder at the last sync; NULL for a bucket. Another
    -- device now is a disk unmounted under the source: no evidence of deleted files.
    device      bigint
);

ALTER TABLE documents
    ADD COLUMN source_id bigint REFERENCES sources (id),
    ADD COLUMN source_uri text,
    -- Last modification time seen, in ns (files: st_mtime_ns; objects: Last-Modified).
    ADD COLUMN source_mtime_ns bigint,
    -- Objects: the ETag the listing gave (Last-Modified has whole seconds; files: NULL).
    ADD COLUMN source_etag text,
    ADD CONSTRAINT documents_source_uri CHECK ((source_id IS NULL) = (source_uri IS NULL));

-- One live document per file of a source: two syncs at once cannot both create it.
CREATE UNIQUE INDEX documents_source ON documents (source_id, source_uri)
    WHERE source_id IS NOT NULL;

-- Objects (originals, images) of a document's older versions: deleted once generation
-- `generation` (the version that replaced them) or a later one is indexed. An object a
-- newer version still uses is kept (same key: same content).
CREATE TABLE superseded_objects (
    document_id  uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    generation   integer NOT NULL,
    object_key   text NOT NULL,
    PRIMARY KEY (document_id, object_key)
);

-- A file deleted from its source: its document is gone; this row stays for `status`.
CREATE TABLE source_tombstones (
    source_id    bigint NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    source_uri   text NOT NULL,
    document_id  uuid NOT NULL,
    sha256       text NOT NULL,
    deleted_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, document_id)
);

-- 0012: the generation whose points answer search (the last successful index job's;
-- NULL: none). Search reads a hit's document here and drops points of other generations.
ALTER TABLE documents ADD COLUMN indexed_generation integer;

-- 0015: the user's key/value metadata; search filters on it here (containment: GIN).
ALTER TABLE documents ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb
    CONSTRAINT documents_metadata_object CHECK (jsonb_typeof(metadata) = 'object');
CREATE INDEX documents_metadata ON documents USING gin (metadata jsonb_path_ops);

-- 0016: who may read a document (NULL: every caller); search trims hits by it here.
ALTER TABLE documents ADD COLUMN readers text[]
    CONSTRAINT documents_readers_named CHECK (array_position(readers, NULL) IS NULL);
CREATE INDEX documents_readers ON documents USING gin (readers) WHERE readers IS NOT NULL;

-- 0017: what a sync source gives its documents (metadata, readers).
ALTER TABLE sources
    ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN readers text[];

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

-- 0023: indexes so every interactive read is an index scan at a million documents
-- (issue 37; tests/integration/test_query_plans.py plans each one on 100,000).
--
-- `failures` lists failed jobs newest first: without this it read every failed job
-- through stage_jobs_failed and sorted them (100k failed documents: the whole set per
-- page). Walked in order, the first page stops after its LIMIT.
CREATE INDEX stage_jobs_failed_newest ON stage_jobs (finished_at DESC NULLS LAST, id)
    WHERE state = 'failed';

-- Deleting documents cascades to these by document_id, which led neither key: each
-- deleted document scanned the table (an upload key per uploaded document, a row per
-- document a model migration passed: both grow with the documents).
CREATE INDEX upload_keys_document ON upload_keys (document_id);
CREATE INDEX model_migration_documents_document ON model_migration_documents (document_id);

-- sync's planning looks up the collection's documents as large as a new file (only those
-- files are hashed): by collection alone that read the whole collection per sync.
CREATE INDEX documents_size ON documents (collection, byte_size);

-- The CLI finds a document by its file name where it takes an id (0025).
CREATE INDEX documents_filename ON documents (filename, collection);
