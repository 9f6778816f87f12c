"""Which PostgreSQL: connecting, migrating, classifying its errors, and the embedded cluster kept
up by its supervisor."""
