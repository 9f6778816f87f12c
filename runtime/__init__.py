"""ragline's engine: per-stage leased jobs on PostgreSQL.

Knows documents, jobs, leases and stages by name; never imports the pipeline.
"""

from runtime.errors import (
    InvalidDocument,
    LeaseLost,
    MissingInput,
    PermanentError,
    RaglineError,
    RateLimited,
    TransientError,
)
from runtime.stage import JobContext, Pipeline, Stage

__all__ = [
    "InvalidDocument",
    "JobContext",
    "LeaseLost",
    "MissingInput",
    "PermanentError",
    "Pipeline",
    "RaglineError",
    "RateLimited",
    "Stage",
    "TransientError",
]
