"""ragline's engine: per-stage leased jobs on PostgreSQL.

Knows documents, jobs, leases and stages by name; never imports the pipeline. A pipeline
uses the engine through one face, :mod:`runtime.api`.
"""
