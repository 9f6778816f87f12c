-- 0002: checkpoint tables, the outputs of the pipeline's stages.

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
    PRIMARY KEY (document_id, ordinal),
    CHECK (page_end >= page_start)
);

-- embed: content-addressed cache, model + sha256(text) -> vector. Shared by documents,
-- so re-embedding unchanged text is free and re-indexing needs no embedding call.
CREATE TABLE embeddings (
    model       text NOT NULL,
    sha256      text NOT NULL,
    dimensions  integer NOT NULL,
    vector      real[] NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, sha256)
);
