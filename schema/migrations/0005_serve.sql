-- 0005: what `serve` needs: document events for its live stream, upload idempotency keys.
--
-- Events are recorded only while a server listens. A transaction that NOTIFYs takes a
-- global lock until its commit is flushed, which serializes the commits of every
-- completing job (bench.queue: half the throughput at 16 slots); an events row per state
-- change is WAL the engine need not write when nobody reads it. So each running `serve`
-- process keeps a row in event_listeners fresh, and the trigger writes the event and
-- NOTIFYs only while such a row is younger than 30 s. Without a server a state change
-- costs one probe of that (empty) table.

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

-- Idempotency-Key of an upload -> the document it created (same transaction).
CREATE TABLE upload_keys (
    key          text PRIMARY KEY,
    document_id  uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now()
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
