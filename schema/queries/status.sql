-- Named queries behind `status`, `failures` and the progress of `ingest`.

-- name: stage_overview
-- Per stage: live and failed job counts, the oldest queued job's age and the oldest
-- running job's age, in seconds. Walks the partial indexes, not the finished rows.
SELECT stage,
       count(*) FILTER (WHERE state = 'queued') AS queued,
       count(*) FILTER (WHERE state = 'queued' AND run_after > now()) AS backing_off,
       count(*) FILTER (WHERE state = 'running') AS running,
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'queued')), 0)
           AS oldest_queued_s,
       coalesce(extract(epoch FROM now() - min(started_at) FILTER (WHERE state = 'running')), 0)
           AS oldest_running_s
FROM stage_jobs
WHERE state IN ('queued', 'running')
GROUP BY stage;

-- name: failed_by_stage
-- Failed documents per stage that failed them, from the counts the triggers keep (0022):
-- a job that fails fails its document at the job's stage in the same statement, so this
-- is the number of failed current-generation jobs, without joining 100k failed rows.
SELECT stage, sum(n)::bigint AS failed
FROM document_counts WHERE status = 'failed'
GROUP BY stage HAVING sum(n) <> 0;

-- name: documents_progress
-- For a set of documents: per stage and state, how many current-generation jobs.
-- $1 document ids
SELECT j.stage, j.state::text AS state, count(*) AS n
FROM stage_jobs AS j JOIN documents AS d ON d.id = j.document_id AND d.generation = j.generation
WHERE j.document_id = ANY($1::uuid[])
GROUP BY 1, 2;

-- name: failures
-- Failed documents with the failing job, newest first.
-- $1 stage (NULL: any), $2 error kind (NULL: any), $3 limit
SELECT d.id AS document_id, d.filename, j.id AS job_id, j.stage, j.error_kind, j.last_error,
       j.attempts, j.finished_at
FROM stage_jobs AS j JOIN documents AS d ON d.id = j.document_id AND d.generation = j.generation
WHERE j.state = 'failed' AND d.status = 'failed'
  AND ($1::text IS NULL OR j.stage = $1) AND ($2::text IS NULL OR j.error_kind = $2)
ORDER BY j.finished_at DESC NULLS LAST
LIMIT $3;

-- name: queue_position
-- How many queued jobs of the same stage are ahead of this one (claim order).
-- $1 job id
SELECT count(*) FROM stage_jobs AS a, stage_jobs AS me
WHERE me.id = $1 AND a.state = 'queued' AND a.stage = me.stage AND a.id <> me.id
  AND a.run_after <= now()
  AND (a.priority, -extract(epoch FROM a.run_after), -a.id)
      > (me.priority, -extract(epoch FROM me.run_after), -me.id);
