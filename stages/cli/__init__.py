"""The pipeline's click commands: parse flags, call an action, print."""
