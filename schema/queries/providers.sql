-- Named queries on providers: the circuit and the budgets every worker process shares
-- (runtime/providers/specs.py). A provider row is locked only for the length of one statement,
-- so the callers of one provider queue on it for about a round trip each.

-- name: register_providers
-- Record which stages call which providers (workers at start); creates missing rows.
-- $1 provider names, $2 the stage of each (a provider two stages call appears twice)
INSERT INTO providers (name, stages)
SELECT name, array_agg(DISTINCT stage ORDER BY stage)
FROM unnest($1::text[], $2::text[]) AS u (name, stage)
GROUP BY name
-- In name order, so two workers registering the same providers never deadlock.
ORDER BY name
ON CONFLICT (name) DO UPDATE
SET stages = ARRAY(SELECT DISTINCT s FROM unnest(providers.stages || excluded.stages) AS s
                   ORDER BY s);

-- name: provider_states
-- Every provider's circuit and budget clocks (workers' view of the circuits, `status`).
SELECT name, stages, state, failures, failing_since, last_error, probes, next_probe_at,
       probe_owner, paused_until, changed_at
FROM providers
ORDER BY name;

-- name: acquire_slots
-- Reserve $2 request slots and $4 tokens of a provider's budget (GCRA: each clock holds
-- the earliest time the next request / token may go; a reservation moves it on by the
-- reserved amount). Never refuses: returns how long the caller waits for its first
-- slot, computed on the database's clock so processes on other hosts agree. A pause
-- from a 429 moves both clocks past it. Also returns the circuit, for free.
-- $1 provider, $2 requests, $3 seconds per request (0: no request budget),
-- $4 tokens, $5 seconds per token (0: no token budget), $6 now
WITH p AS (
    SELECT name,
           greatest(request_at, coalesce($6, now()), paused_until) AS r0,
           greatest(token_at, coalesce($6, now()), paused_until) AS t0
    FROM providers
    WHERE name = $1
    FOR UPDATE
)
UPDATE providers AS q
SET request_at = p.r0 + make_interval(secs => $2::int * $3::float8),
    token_at = p.t0 + make_interval(secs => $4::int * $5::float8)
FROM p
WHERE q.name = p.name
RETURNING extract(epoch FROM p.r0 - coalesce($6, now()))::float8 AS request_wait_s,
          extract(epoch FROM p.t0 - coalesce($6, now()))::float8 AS token_wait_s,
          q.state, q.failures, q.next_probe_at, q.probe_owner;

-- name: record_failure
-- A transient failure of a call. The N-th consecutive one (across all processes) opens
-- the circuit, with the first probe after $4 seconds; a failed probe (or any failure
-- while half-open) reopens it with the interval doubled, capped at $5. NOTIFYs the
-- workers when the state changes, so they stop claiming at once.
-- $1 provider, $2 one-line error, $3 failures that open it, $4 first probe interval s,
-- $5 probe interval cap s, $6 now
WITH old AS (
    SELECT name, state, failures, probes FROM providers WHERE name = $1 FOR UPDATE
), upd AS (
    UPDATE providers AS p
    SET failures = old.failures + 1,
        failing_since = coalesce(p.failing_since, coalesce($6, now())),
        last_error = $2::text,
        state = CASE WHEN old.state = 'half_open' OR old.failures + 1 >= $3::int THEN 'open'
                     ELSE old.state END,
        probes = CASE WHEN old.state = 'half_open' THEN old.probes + 1
                      WHEN old.state = 'closed' THEN 0 ELSE old.probes END,
        next_probe_at = CASE
            WHEN old.state = 'half_open' THEN coalesce($6, now())
                 + make_interval(secs => least($5::float8, $4::float8 * 2 ^ least(old.probes + 1, 30)))
            WHEN old.state = 'closed' AND old.failures + 1 >= $3
                 THEN coalesce($6, now()) + make_interval(secs => $4)
            ELSE p.next_probe_at END,
        probe_owner = CASE WHEN old.state = 'half_open' THEN NULL ELSE p.probe_owner END,
        changed_at = CASE WHEN old.state = 'half_open' OR (old.state = 'closed'
                          AND old.failures + 1 >= $3) THEN coalesce($6, now())
                          ELSE p.changed_at END
    FROM old
    WHERE p.name = old.name
    RETURNING p.name, old.state AS old_state, p.state, p.failures, p.failing_since,
              p.next_probe_at, p.probes
)
SELECT name, old_state, state, failures, failing_since, next_probe_at, probes,
       (SELECT count(pg_notify('ragline_jobs', 'provider:' || name))
        FROM upd WHERE old_state <> state) AS notified
FROM upd;

-- name: record_success
-- A call succeeded (or the provider answered at all): reset the failure count and close
-- the circuit. Writes only when there is something to reset, and NOTIFYs the workers
-- when the circuit was not closed, so every one of them resumes claiming at once.
-- $1 provider, $2 now
WITH old AS (
    SELECT name, state FROM providers
    WHERE name = $1 AND (state <> 'closed' OR failures > 0)
    FOR UPDATE
), upd AS (
    UPDATE providers AS p
    SET state = 'closed', failures = 0, failing_since = NULL, probes = 0,
        next_probe_at = NULL, probe_owner = NULL,
        changed_at = CASE WHEN old.state <> 'closed' THEN coalesce($2, now())
                          ELSE p.changed_at END
    FROM old
    WHERE p.name = old.name
    RETURNING p.name, old.state AS old_state
)
SELECT old_state,
       (SELECT count(pg_notify('ragline_jobs', 'provider:' || name))
        FROM upd WHERE old_state <> 'closed') AS notified
FROM upd;

-- name: take_probe
-- Half-open: let this caller's call be the one probe, if a probe is due (the circuit is
-- open and its interval has passed, or the last probe's caller has not reported within
-- one interval, e.g. it died). Returns a row only to the one caller that got it. Either
-- way at most one call per probe interval reaches the provider.
-- $1 provider, $2 owner, $3 first probe interval s, $4 probe interval cap s, $5 now
UPDATE providers
SET state = 'half_open', probe_owner = $2,
    next_probe_at = coalesce($5, now())
        + make_interval(secs => least($4::float8, $3::float8 * 2 ^ least(probes, 30))),
    changed_at = coalesce($5, now())
WHERE name = $1 AND state IN ('open', 'half_open') AND next_probe_at <= coalesce($5, now())
RETURNING name, next_probe_at;

-- name: pause_provider
-- A 429 with Retry-After: no process sends to this provider before it has passed.
-- $1 provider, $2 seconds, $3 now
UPDATE providers
SET paused_until = greatest(paused_until, coalesce($3, now()) + make_interval(secs => $2::float8))
WHERE name = $1;
