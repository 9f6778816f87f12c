-- Named queries of the migration runner.

-- name: lock_migrations
-- Session advisory lock: concurrent migrators take turns (released by unlock_migrations).
SELECT pg_advisory_lock(hashtext('ragline.migrate'));

-- name: unlock_migrations
-- Release the migration lock.
SELECT pg_advisory_unlock(hashtext('ragline.migrate'));

-- name: create_migrations_table
-- IF NOT EXISTS: the first migrator creates it; later ones find it.
CREATE TABLE IF NOT EXISTS ragline_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

-- name: migrations_table_exists
-- Whether any migration ran here.
SELECT to_regclass('ragline_migrations') IS NOT NULL;

-- name: applied_migrations
-- Versions already applied.
SELECT version FROM ragline_migrations ORDER BY version;

-- name: record_migration
-- Note a migration as applied.
-- $1 version, $2 name
INSERT INTO ragline_migrations (version, name) VALUES ($1, $2);
