"""Sources a sync reads: a folder, or an S3/MinIO bucket and prefix."""
