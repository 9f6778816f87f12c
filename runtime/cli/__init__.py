"""``python -m runtime``: the command group, the options every command shares, and the engine's own
commands."""
