"""Prometheus metrics of the engine, per stage (served with ``--metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CLAIMED = Counter("ragline_jobs_claimed", "Jobs leased by this process", ["stage"])
SUCCEEDED = Counter("ragline_jobs_succeeded", "Jobs completed", ["stage"])
FAILED = Counter("ragline_jobs_failed", "Jobs failed for good", ["stage", "kind"])
RETRIED = Counter("ragline_jobs_retried", "Failed attempts that will be retried", ["stage", "kind"])
RATE_LIMITED = Counter(
    "ragline_jobs_rate_limited", "Attempts snoozed by a 429 (not counted as failures)", ["stage"]
)
LEASE_LOST = Counter("ragline_jobs_lease_lost", "Jobs whose lease was lost mid-run", ["stage"])
RELEASED = Counter("ragline_jobs_released", "Jobs handed back on shutdown", ["stage"])
SNOOZED = Counter(
    "ragline_jobs_snoozed", "Jobs handed back untried: another worker is better placed", ["stage"]
)
RESCUED = Counter("ragline_jobs_rescued", "Expired leases taken back by the sweep", ["stage"])
DB_ERRORS = Counter("ragline_db_errors", "Database connection errors seen", ["where"])
DB_RESTARTS = Counter("ragline_embedded_db_restarts", "Embedded PostgreSQL starts after it died")
STORAGE_FULL = Counter(
    "ragline_storage_full", "Jobs handed back because storage was full", ["stage", "where"]
)
DURATION = Histogram(
    "ragline_job_duration_seconds",
    "Time from claim to outcome",
    ["stage", "outcome"],
    buckets=(0.005, 0.02, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900),
)
QUEUED = Gauge("ragline_queue_depth", "Queued jobs per stage (all workers)", ["stage"])
RUNNING = Gauge("ragline_jobs_running", "Running jobs per stage (all workers)", ["stage"])
OLDEST_QUEUED = Gauge(
    "ragline_oldest_queued_seconds", "Age of the oldest queued job per stage", ["stage"]
)
