"""Asset stores: a directory under the data dir, or MinIO/S3."""
