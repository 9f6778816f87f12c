-- The full current schema of ragline, for reading and for the migration test.
-- Generated from schema/migrations/ (0001 + 0002); tests/migration checks they agree.
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
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Same bytes submitted twice are the same document unless the submitter forces a copy.
CREATE UNIQUE INDEX documents_sha256_unforced ON documents (sha256) WHERE NOT forced;
CREATE INDEX documents_status ON documents (status);

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
    PRIMARY KEY (document_id, page)
);

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
    PRIMARY KEY (document_id, sha256)
);

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
    PRIMARY KEY (document_id, ordinal),
    CHECK (page_end >= page_start)
);

CREATE INDEX chunks_over_window ON chunks (document_id) WHERE over_window;

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
