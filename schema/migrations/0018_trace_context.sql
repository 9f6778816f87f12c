-- 0018: one OpenTelemetry trace per document (docs/tracing.md). A job carries the W3C
-- `traceparent` of the span that submitted its document; each run of the job is a span
-- in that trace, in whichever process claims it, and the next stage's job copies it in
-- the completion that enqueues it. NULL: tracing was off when the document came in.
-- A plain nullable column: adding it rewrites nothing, and the engine's queries read it
-- only from rows they already fetch.
ALTER TABLE stage_jobs ADD COLUMN trace_context text;
