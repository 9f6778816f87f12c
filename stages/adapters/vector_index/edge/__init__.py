"""The embedded vector index: one qdrant-edge shard per vector collection under the data dir."""
