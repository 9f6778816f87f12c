-- 0007: collections, and switching the embedding model without a half-built index.
--
-- documents.collection: every document belongs to exactly one collection (a tenant:
-- search, delete, verify, reprocess and status take one). Names are short slugs, checked
-- here so no path can write another shape. The same bytes may be a document in two
-- collections; within one they dedupe as before.
--
-- vector_aliases: the live vector collection, by alias name. Search, the embed stage and
-- the index stage read the live embedding model and its physical collection here (Qdrant
-- also gets a real alias; the embedded index has only this row). A model migration fills
-- a new physical collection while this row still names the old one, then switches the
-- row in one transaction once every ready document has its points in the new one.
--
-- model_migrations / model_migration_documents: one migration at a time per alias, and
-- which documents (at which generation) the migration already has in the new
-- collection, so a migration killed midway resumes where it was.

ALTER TABLE documents ADD COLUMN collection text NOT NULL DEFAULT 'default'
    CONSTRAINT documents_collection_name CHECK (collection ~ '^[a-z0-9][a-z0-9_-]{0,62}$');

DROP INDEX documents_sha256_unforced;
CREATE UNIQUE INDEX documents_sha256_unforced ON documents (collection, sha256) WHERE NOT forced;
CREATE INDEX documents_collection ON documents (collection, status);

CREATE TABLE vector_aliases (
    alias       text PRIMARY KEY,
    model       text NOT NULL,
    dimensions  integer NOT NULL CHECK (dimensions > 0),
    collection  text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

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

CREATE TABLE model_migration_documents (
    migration_id  bigint NOT NULL REFERENCES model_migrations (id) ON DELETE CASCADE,
    document_id   uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    generation    integer NOT NULL,
    points        integer NOT NULL CHECK (points >= 0),
    migrated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (migration_id, document_id)
);
