-- 0004: providers (issue 9): one row per external provider and model that every worker
-- process shares: its circuit (closed / open / half-open, consecutive transient failures
-- counted across the fleet) and its request and token budgets (two GCRA clocks: the next
-- free request slot and the next free token slot), plus a fleet-wide pause from a 429's
-- Retry-After. And per job, when its current run of transient failures began, so that
-- transient faults are retried for a time budget instead of a count of attempts.

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

-- NULL while the job has not failed transiently since it last made progress.
ALTER TABLE stage_jobs ADD COLUMN transient_since timestamptz;
-- Transient failures since then: the exponent of the job's backoff.
ALTER TABLE stage_jobs ADD COLUMN transient_failures integer NOT NULL DEFAULT 0
    CHECK (transient_failures >= 0);
