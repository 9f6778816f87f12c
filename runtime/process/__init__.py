"""What every process shares: logs, metrics, the malloc heap, interpreter settings, identity,
privacy, names."""
