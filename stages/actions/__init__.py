"""What users ask for beyond the five stages, written once: the CLI, the HTTP API and sync call
these."""
