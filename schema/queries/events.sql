-- Named queries on document events (the live stream of `serve`) and their listeners.

-- name: register_listener
-- Record that a server listens (or still does): while its row is younger than 30 s the
-- documents trigger writes events and NOTIFYs ragline_events.
-- $1 listener id
INSERT INTO event_listeners (id) VALUES ($1)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now();

-- name: unregister_listener
-- A server stops listening.
-- $1 listener id
DELETE FROM event_listeners WHERE id = $1;

-- name: prune_listeners
-- Forget listeners not seen for $1 seconds (servers that died).
-- $1 seconds
DELETE FROM event_listeners WHERE last_seen_at < now() - make_interval(secs => $1);

-- name: events_after
-- Events after an id, oldest first (a stream resumed with Last-Event-ID).
-- $1 last id seen, $2 limit
SELECT id, document_id, status, stage, error, filename, generation
FROM document_events WHERE id > $1 ORDER BY id LIMIT $2;

-- name: oldest_event_id
-- The oldest event still kept (NULL: none); a resume from before it has a gap.
SELECT min(id) FROM document_events;

-- name: prune_events
-- Drop events older than $1 seconds.
-- $1 seconds
DELETE FROM document_events WHERE at < now() - make_interval(secs => $1);
