-- Named queries on stage_jobs: the life of a job (docs/architecture.md, "A job's life").
-- Every "now" is `coalesce($n, now())` so tests can pin the database clock.
-- Workers run these as generic plans (plan_cache_mode = force_generic_plan, see
-- runtime/worker/worker.py): replanning the big ones costs more than running them, so each is
-- written to be index lookups whatever the parameters (= ANY(ARRAY(...)) rather than joins
-- on CTEs, whose row counts a generic plan cannot know).

-- name: complete_and_claim
-- The hot path, one statement and one commit: complete held jobs (enqueue each one's next
-- stage, move its document on, wake idle workers of that stage), then lease queued jobs
-- for the stages whose slots those completions freed. A worker claims with no
-- completions, and completes with no claims; its completer does both at once for every
-- job that finished while the last batch was in flight (group commit).
-- A lost token matches no row, so nothing happens for that job: the caller sees it is not
-- among the completed rows. The jobs this statement inserts or completes are not in its
-- snapshot, so it never claims them (the worker wakes that stage's loop itself).
-- Rows: ('completed', id) per completed job, ('claimed', job...) per leased job.
-- $1 job ids, $2 their lease tokens, $3 their next stages (NULL: the last stage), $4 now,
-- $5 worker id, $6 lease seconds, $7 stages to claim for, $8 how many for each,
-- $9 stages the caller runs itself, $10 its free slots for each (it wakes its own loop
-- for that many new jobs of the stage, so only jobs beyond them need a NOTIFY)
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[]) AS i (id, token, next_stage)
), held AS (
    SELECT j.id, i.next_stage
    FROM stage_jobs AS j JOIN input AS i ON j.id = i.id AND j.lease_token = i.token
    -- The state compared as text: as `state = 'running'` it matches the predicate of
    -- stage_jobs_expiry, and a generic plan made while few jobs ran walks that whole
    -- index (every running job, and every dead entry of one until a vacuum) per call.
    WHERE j.id = ANY($1::bigint[]) AND j.state::text = 'running'
    -- Lock in id order, as heartbeat_jobs does, so the two never deadlock.
    ORDER BY j.id
    FOR UPDATE OF j
), done AS (
    UPDATE stage_jobs AS j
    SET state = 'succeeded', finished_at = coalesce($4, now()), lease_expires_at = NULL
    FROM held AS i
    WHERE j.id = i.id
    RETURNING j.id, j.document_id, j.generation, j.max_attempts, j.priority, i.next_stage,
              j.trace_context
), next_job AS (
    -- The next stage's job carries the document's trace forward (docs/tracing.md).
    INSERT INTO stage_jobs (document_id, stage, generation, max_attempts, priority, run_after,
                            trace_context)
    SELECT document_id, next_stage, generation, max_attempts, priority, coalesce($4, now()),
           trace_context
    FROM done
    WHERE next_stage IS NOT NULL
    ON CONFLICT (document_id, stage) WHERE state IN ('queued', 'running') DO NOTHING
    RETURNING stage
), wake AS (
    -- NOTIFY only stages that had no due job: a worker with work to do claims again as
    -- soon as a slot frees, so only idle ones need waking. This matters: a transaction
    -- that NOTIFYs takes a global lock until its commit is flushed, which serializes the
    -- commits of every completing job (measured: half the throughput at 16 slots). An
    -- idle worker that misses a wake-up still polls. Nor are stages woken whose new jobs
    -- the caller's own free slots will take: it wakes itself, without the lock (measured:
    -- +15-25% hops/s at 1 and 4 slots). One probe of stage_jobs_claim per stage: as NOT
    -- EXISTS the planner may make it an anti join over the whole table.
    SELECT s.stage
    FROM (SELECT stage, count(*) AS n FROM next_job GROUP BY stage) AS s
    LEFT JOIN unnest($9::text[], $10::int[]) AS f (stage, free) ON f.stage = s.stage
    WHERE s.n > coalesce(f.free, 0) AND (
        SELECT q.id FROM stage_jobs AS q
        WHERE q.state = 'queued' AND q.stage = s.stage AND q.run_after <= coalesce($4, now())
        ORDER BY q.priority DESC, q.run_after, q.id
        LIMIT 1
    ) IS NULL
), doc AS (
    UPDATE documents AS d
    SET status = CASE WHEN done.next_stage IS NULL THEN 'ready' ELSE 'processing' END
                 ::ragline_document_status,
        stage = coalesce(done.next_stage, d.stage),
        error = NULL,
        updated_at = coalesce($4, now())
    FROM done
    WHERE d.id = done.document_id AND d.generation = done.generation
), picked AS (
    SELECT p.id
    FROM unnest($7::text[], $8::int[]) AS w (stage, n)
    CROSS JOIN LATERAL (
        SELECT q.id
        FROM stage_jobs AS q
        WHERE q.state = 'queued' AND q.stage = w.stage AND q.run_after <= coalesce($4, now())
        -- Same order as the stage_jobs_claim index: an index walk with a LIMIT.
        ORDER BY q.priority DESC, q.run_after, q.id
        LIMIT w.n
        -- SKIP LOCKED: concurrent claimers take different rows instead of queueing on locks.
        FOR UPDATE SKIP LOCKED
    ) AS p
), claimed AS (
    UPDATE stage_jobs AS j
    SET state = 'running',
        attempts = j.attempts + 1,
        lease_owner = $5,
        -- A fresh token per claim is the fencing token: every later write checks it.
        lease_token = gen_random_uuid(),
        lease_expires_at = coalesce($4, now()) + make_interval(secs => $6),
        started_at = coalesce($4, now()),
        finished_at = NULL
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.document_id, j.stage, j.generation, j.attempts, j.max_attempts,
              j.lease_token, j.lease_expires_at, j.created_at, j.trace_context
)
-- NOTIFY is transactional: idle workers of the next stage wake at commit.
SELECT 'completed' AS kind, id, NULL::uuid AS document_id, NULL::text AS stage,
       NULL::int AS generation, NULL::int AS attempts, NULL::int AS max_attempts,
       NULL::uuid AS lease_token, NULL::timestamptz AS lease_expires_at,
       NULL::timestamptz AS created_at, NULL::text AS filename,
       NULL::text AS trace_context,
       (SELECT count(pg_notify('ragline_jobs', stage)) FROM wake) AS notified
FROM done
UNION ALL
SELECT 'claimed', c.id, c.document_id, c.stage, c.generation, c.attempts, c.max_attempts,
       c.lease_token, c.lease_expires_at, c.created_at,
       (SELECT d.filename FROM documents AS d WHERE d.id = c.document_id), c.trace_context, 0
FROM claimed AS c;

-- name: completed_earlier
-- Of jobs a completion did not find held: those an earlier call with the same token
-- completed (its reply was lost with the connection), so the caller's retry holds.
-- $1 job ids, $2 their lease tokens
SELECT j.id
FROM stage_jobs AS j JOIN unnest($1::bigint[], $2::uuid[]) AS i (id, token)
  ON j.id = i.id AND j.lease_token = i.token
WHERE j.id = ANY($1::bigint[]) AND j.state = 'succeeded';

-- name: heartbeat_jobs
-- Renew the leases this worker still holds; returns the ids whose token still holds.
-- $1 job ids, $2 their lease tokens, $3 lease seconds, $4 now
WITH held AS (
    SELECT j.id
    FROM stage_jobs AS j
    JOIN unnest($1::bigint[], $2::uuid[]) AS h (id, token)
      ON j.id = h.id AND j.lease_token = h.token
    WHERE j.state = 'running'
    -- Lock in id order, as complete_jobs does: two multi-row statements on the same jobs
    -- (this heartbeat and a batch of completions) otherwise deadlock.
    ORDER BY j.id
    FOR UPDATE OF j
)
UPDATE stage_jobs AS j
SET lease_expires_at = coalesce($4, now()) + make_interval(secs => $3)
FROM held
WHERE j.id = held.id
RETURNING j.id;

-- name: check_lease
-- Lock a job's row if its lease still holds (guards intermediate checkpoints).
-- $1 job id, $2 lease token
SELECT id FROM stage_jobs
WHERE id = $1 AND lease_token = $2 AND state = 'running'
FOR UPDATE;

-- name: retry_or_fail_job
-- Record a failed attempt: requeue after a delay, or fail the job (permanent error, or
-- attempts exhausted) and with it the document, naming the stage.
-- $1 job id, $2 lease token, $3 one-line error, $4 error kind, $5 permanent,
-- $6 delay seconds, $7 now
WITH failed AS (
    UPDATE stage_jobs
    SET state = CASE WHEN $5 OR attempts >= max_attempts THEN 'failed' ELSE 'queued' END
                ::ragline_job_state,
        run_after = coalesce($7, now()) + make_interval(secs => $6),
        last_error = $3,
        error_kind = $4,
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = CASE WHEN $5 OR attempts >= max_attempts THEN coalesce($7, now()) END
    WHERE id = $1 AND lease_token = $2 AND state = 'running'
    RETURNING document_id, stage, generation, state, attempts
), doc AS (
    UPDATE documents AS d
    -- The failing stage is the document's stage: document_counts (0022) counts failed
    -- documents under it, which is `status`'s failed-per-stage column.
    SET status = 'failed', stage = failed.stage, error = failed.stage || ': ' || $3,
        updated_at = coalesce($7, now())
    FROM failed
    WHERE failed.state = 'failed' AND d.id = failed.document_id
      AND d.generation = failed.generation
    RETURNING d.id
)
SELECT state, attempts FROM failed;

-- name: release_job
-- Hand a held job back without counting the attempt: graceful stop (delay 0) or a
-- rate-limit snooze (delay = Retry-After). Token-guarded.
-- $1 job id, $2 lease token, $3 delay seconds, $4 note (NULL keeps last_error), $5 kind, $6 now
WITH released AS (
    UPDATE stage_jobs
    SET state = 'queued',
        attempts = greatest(attempts - 1, 0),
        run_after = coalesce($6, now()) + make_interval(secs => $3),
        last_error = coalesce($4, last_error),
        error_kind = coalesce($5, error_kind),
        lease_token = NULL,
        lease_expires_at = NULL
    WHERE id = $1 AND lease_token = $2 AND state = 'running'
    RETURNING stage
)
SELECT count(pg_notify('ragline_jobs', stage)) AS released FROM released;

-- name: rescue_expired
-- Requeue up to $2 jobs whose lease expired (their worker is gone). The attempt counts,
-- so a document that kills its worker every time ends failed instead of looping.
-- $1 now, $2 limit
WITH expired AS (
    SELECT id
    FROM stage_jobs
    WHERE state = 'running' AND lease_expires_at < coalesce($1, now())
    ORDER BY lease_expires_at
    LIMIT $2
    -- Several workers sweep at once: each takes different rows.
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE stage_jobs AS j
    SET state = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END
                ::ragline_job_state,
        lost = j.lost + 1,
        last_error = format('worker lost %s times (lease of %s expired)', j.lost + 1,
                            j.lease_owner),
        error_kind = 'worker_lost',
        lease_token = NULL,
        lease_expires_at = NULL,
        run_after = coalesce($1, now()),
        finished_at = CASE WHEN j.attempts >= j.max_attempts THEN coalesce($1, now()) END
    FROM expired
    WHERE j.id = expired.id
    RETURNING j.id, j.document_id, j.stage, j.generation, j.state, j.last_error, j.attempts,
              j.max_attempts, j.created_at, j.lease_owner, j.trace_context
), doc AS (
    UPDATE documents AS d
    SET status = 'failed', stage = rescued.stage,
        error = rescued.stage || ': ' || rescued.last_error, updated_at = coalesce($1, now())
    FROM rescued
    WHERE rescued.state = 'failed' AND d.id = rescued.document_id
      AND d.generation = rescued.generation
    RETURNING d.id
)
SELECT r.id, r.document_id, r.stage, r.state::text AS state, r.last_error, r.generation,
       r.attempts, r.max_attempts, r.created_at, r.lease_owner, r.trace_context,
       -- Uncorrelated, so evaluated once: wake the stages that got work back.
       (SELECT count(pg_notify('ragline_jobs', s.stage))
        FROM (SELECT DISTINCT stage FROM rescued WHERE state = 'queued') AS s) AS notified
FROM rescued AS r;

-- name: enqueue_jobs
-- Enqueue jobs; one already live for the same (document, stage) is left as it is.
-- $1 document ids, $2 stages, $3 generations, $4 priorities, $5 max attempts, $6 now,
-- $7 trace contexts (W3C traceparent or NULL, docs/tracing.md)
WITH added AS (
    INSERT INTO stage_jobs (document_id, stage, generation, priority, max_attempts, run_after,
                            trace_context)
    SELECT n.document_id, n.stage, n.generation, n.priority, n.max_attempts,
           coalesce($6, now()), n.trace_context
    FROM unnest($1::uuid[], $2::text[], $3::int[], $4::int[], $5::int[], $7::text[])
         AS n (document_id, stage, generation, priority, max_attempts, trace_context)
    ON CONFLICT (document_id, stage) WHERE state IN ('queued', 'running') DO NOTHING
    RETURNING id, stage
), woken AS (
    SELECT DISTINCT stage FROM added
)
SELECT (SELECT count(*) FROM added) AS added,
       (SELECT count(pg_notify('ragline_jobs', stage)) FROM woken) AS notified;

-- name: lock_document_jobs
-- Lock a document's live jobs, in id order, before its own row: completing or failing a
-- job locks the job, then its document (complete_and_claim, retry_or_fail_job), so a
-- transaction that updates the document and then cancels its jobs (reprocess, delete, a
-- new version) takes them in the same order here, or each waits for the other until
-- PostgreSQL aborts one. A job this waits for, once finished, is skipped.
-- $1 document id
SELECT id FROM stage_jobs
WHERE document_id = $1 AND state IN ('queued', 'running')
ORDER BY id
FOR UPDATE;

-- name: cancel_document_jobs
-- Cancel a document's live jobs of generations before $2 (reprocess, delete).
-- $1 document id, $2 generation
UPDATE stage_jobs
SET state = 'cancelled', finished_at = now(), lease_token = NULL, lease_expires_at = NULL
WHERE document_id = $1 AND generation < $2 AND state IN ('queued', 'running')
RETURNING id;

-- name: count_live_jobs
-- How many jobs of these stages are queued or running (any run_after).
-- $1 stages
SELECT count(*) FROM stage_jobs WHERE stage = ANY($1::text[]) AND state IN ('queued', 'running');

-- name: get_job
-- One job in full.
-- $1 job id
SELECT id, document_id, stage, generation, state::text AS state, attempts, max_attempts, lost,
       priority, run_after, lease_owner, lease_token, lease_expires_at, last_error,
       error_kind, created_at, started_at, finished_at, trace_context
FROM stage_jobs WHERE id = $1;

-- name: document_jobs
-- A document's jobs, oldest first (its timeline).
-- $1 document id
SELECT id, document_id, stage, generation, state::text AS state, attempts, max_attempts, lost,
       priority, run_after, lease_owner, lease_token, lease_expires_at, last_error,
       error_kind, created_at, started_at, finished_at, trace_context
FROM stage_jobs WHERE document_id = $1 ORDER BY id;

-- name: retry_failed
-- Requeue failed jobs of failed documents (current generation) matching the filters, with
-- a fresh attempt budget; their documents go back to pending at that stage.
-- $1 stage (NULL: any), $2 error kind (NULL: any), $3 document ids (NULL: any)
WITH picked AS (
    SELECT j.id
    FROM stage_jobs AS j
    JOIN documents AS d ON d.id = j.document_id AND d.generation = j.generation
    WHERE j.state = 'failed' AND d.status = 'failed'
      AND ($1::text IS NULL OR j.stage = $1)
      AND ($2::text IS NULL OR j.error_kind = $2)
      AND ($3::uuid[] IS NULL OR j.document_id = ANY($3))
    FOR UPDATE OF j
), requeued AS (
    UPDATE stage_jobs AS j
    SET state = 'queued', attempts = 0, lost = 0, run_after = now(), finished_at = NULL
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.document_id, j.stage
), docs AS (
    UPDATE documents AS d
    SET status = 'pending', stage = requeued.stage, error = NULL, updated_at = now()
    FROM requeued
    WHERE d.id = requeued.document_id
    RETURNING d.id
)
SELECT r.document_id, r.stage,
       (SELECT count(pg_notify('ragline_jobs', s.stage))
        FROM (SELECT DISTINCT stage FROM requeued) AS s) AS notified
FROM requeued AS r;

-- name: defer_job
-- A transient failure (a provider's fault or 429, the database, an open circuit): hand
-- the job back without counting the attempt, to retry after a capped exponential backoff
-- in the number of its transient failures (equal jitter; a Retry-After is a floor). Once
-- its failures have lasted longer than the retry budget (a time, not a count), the job
-- fails and the document with it. An attempt that checkpointed progress starts both the
-- clock and the count over.
-- $1 job id, $2 lease token, $3 one-line error, $4 error kind, $5 least delay s
-- (Retry-After), $6 base delay s (0: no backoff and no count, e.g. the circuit is open
-- and holds claims anyway), $7 cap s, $8 retry budget s, $9 jitter in [0, 1),
-- $10 progressed, $11 now
WITH cur AS (
    SELECT id,
           CASE WHEN $10::boolean THEN NULL ELSE transient_since END AS since,
           CASE WHEN $10::boolean THEN 0 ELSE transient_failures END AS failures
    FROM stage_jobs
    WHERE id = $1 AND lease_token = $2 AND state = 'running'
    FOR UPDATE
), t AS (
    SELECT id, coalesce(since, coalesce($11, now())) AS since,
           failures + CASE WHEN $6::float8 > 0 THEN 1 ELSE 0 END AS failures,
           extract(epoch FROM coalesce($11, now()) - coalesce(since, coalesce($11, now())))
               ::float8 AS elapsed
    FROM cur
), deferred AS (
    UPDATE stage_jobs AS j
    SET state = CASE WHEN t.elapsed > $8::float8 THEN 'failed' ELSE 'queued' END
                ::ragline_job_state,
        attempts = CASE WHEN t.elapsed > $8 THEN j.attempts
                        ELSE greatest(j.attempts - 1, 0) END,
        transient_since = t.since,
        transient_failures = t.failures,
        run_after = coalesce($11, now()) + make_interval(secs => greatest(
            least($5::float8, $7::float8),
            CASE WHEN $6::float8 > 0
                 THEN least($7, $6 * 2 ^ least(greatest(t.failures - 1, 0), 30))
                      * (0.5 + 0.5 * $9::float8)
                 ELSE 0 END)),
        last_error = CASE WHEN t.elapsed > $8
                          THEN $3::text || format(' (still failing after %s s of retries)',
                                                  round(t.elapsed))
                          ELSE $3 END,
        error_kind = $4::text,
        lease_token = NULL,
        lease_expires_at = NULL,
        finished_at = CASE WHEN t.elapsed > $8 THEN coalesce($11, now()) END
    FROM t
    WHERE j.id = t.id
    RETURNING j.document_id, j.stage, j.generation, j.state, j.run_after, j.last_error
), doc AS (
    UPDATE documents AS d
    SET status = 'failed', stage = deferred.stage,
        error = deferred.stage || ': ' || deferred.last_error, updated_at = coalesce($11, now())
    FROM deferred
    WHERE deferred.state = 'failed' AND d.id = deferred.document_id
      AND d.generation = deferred.generation
    RETURNING d.id
)
SELECT state::text AS state, run_after FROM deferred;

-- name: running_owners_on_host
-- Lease owners of running jobs whose worker id starts with this host's prefix
-- ("host:"); a walk of the stage_jobs_expiry partial index (running rows only).
-- $1 prefix
SELECT DISTINCT lease_owner
FROM stage_jobs
WHERE state = 'running' AND left(lease_owner, length($1)) = $1;

-- name: expire_leases_of
-- Expire now the leases held by workers known to be dead (a process of this host that no
-- longer exists), so the next sweep requeues their jobs without waiting the lease out.
-- The attempt still counts (the worker died holding the job). Returns how many.
-- $1 owners text[]
WITH expired AS (
    UPDATE stage_jobs
    SET lease_expires_at = '-infinity'
    WHERE state = 'running' AND lease_owner = ANY($1::text[])
    RETURNING id
)
SELECT count(*) FROM expired;
