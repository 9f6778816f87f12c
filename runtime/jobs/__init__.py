"""The job store: the port the worker calls, its PostgreSQL and in-memory implementations, the
clock, and the engine's document, status and event queries."""
