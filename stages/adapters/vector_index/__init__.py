"""Vector indexes: the embedded qdrant-edge shards, or a Qdrant server."""
