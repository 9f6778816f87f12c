"""The pipeline's settings table (the README's configuration table, second part).

The engine checks these rows, with its own (:data:`runtime.settings.ENGINE_SETTINGS`),
before it starts anything. Add a variable here as one row. Settings that depend on each
other (``RAGLINE_EMBEDDER=cohere`` needs ``COHERE_API_KEY``) are checked when the services
are built, which ``Services.prepare`` does at start.
"""

from __future__ import annotations

from runtime.settings import MAX_SECONDS, Setting
from stages.chunking import MIN_CHUNK_TOKENS

_HTTP = ("http", "https")

PIPELINE_SETTINGS: tuple[Setting, ...] = (
    Setting.text("COHERE_API_KEY", accepts="a Cohere API key"),
    Setting.url("COHERE_BASE_URL", _HTTP),
    Setting.choice("RAGLINE_EMBEDDER", ("local", "cohere")),
    Setting.text("RAGLINE_EMBED_MODEL", accepts="a Cohere embedding model name"),
    Setting.number("RAGLINE_EMBED_DIMENSIONS", int, minimum=1, maximum=65_536),
    Setting.number(
        "RAGLINE_EMBED_TIMEOUT_S",
        float,
        minimum=0,
        exclusive=True,
        maximum=MAX_SECONDS,
        unit="seconds",
    ),
    Setting.number("RAGLINE_EMBED_RPM", int, minimum=0, unit="requests per minute, 0: unlimited"),
    Setting.number("RAGLINE_EMBED_TPM", int, minimum=0, unit="tokens per minute, 0: unlimited"),
    Setting.number("RAGLINE_VISION_RPM", int, minimum=0, unit="requests per minute, 0: unlimited"),
    Setting.choice("RAGLINE_VISION", ("ocr", "cohere", "none")),
    Setting.text("RAGLINE_VISION_MODEL", accepts="a Cohere vision model name"),
    Setting.number(
        "RAGLINE_VISION_TIMEOUT_S",
        float,
        minimum=0,
        exclusive=True,
        maximum=MAX_SECONDS,
        unit="seconds",
    ),
    Setting.number(
        "RAGLINE_CHUNK_TOKENS", int, minimum=MIN_CHUNK_TOKENS, maximum=1_000_000, unit="tokens"
    ),
    Setting.number(
        "RAGLINE_CHUNK_OVERLAP_TOKENS",
        int,
        minimum=0,
        maximum=500_000,
        unit="tokens, at most half of RAGLINE_CHUNK_TOKENS",
    ),
    Setting.number("RAGLINE_MIN_IMAGE_PX", int, minimum=0, maximum=100_000, unit="pixels"),
    Setting.number("RAGLINE_MAX_IMAGE_PIXELS", int, minimum=1, unit="pixels"),
    Setting.text("MINIO_ENDPOINT", accepts="host:port of MinIO/S3"),
    Setting.text("MINIO_ACCESS_KEY", accepts="an access key"),
    Setting.text("MINIO_SECRET_KEY", accepts="a secret key"),
    Setting.text("MINIO_BUCKET", accepts="a bucket name"),
    Setting.boolean("MINIO_SECURE"),
    # serve (stages/serve)
    Setting.text("RAGLINE_HOST", accepts="a host name or address to bind"),
    Setting(
        name="RAGLINE_PORT",
        accepts="a port from 1 to 65535",
        check=lambda raw: 1 <= int(raw) <= 65535,
        bad_examples=("http", "0", "70000"),
    ),
    Setting(
        name="RAGLINE_API_TOKENS",
        accepts="comma-separated bearer tokens, none of them empty",
        check=lambda raw: all(t.strip() for t in raw.split(",")),
        empty_ok=True,
        bad_examples=(",", "a,,b"),
    ),
    Setting.number("RAGLINE_MAX_UPLOAD_MB", int, minimum=1, maximum=1_048_576, unit="megabytes"),
    Setting(
        name="RAGLINE_CORS_ORIGINS",
        accepts="comma-separated origins such as https://app.example.com, or *",
        check=lambda raw: all(
            o.strip() == "*" or o.strip().startswith(("http://", "https://"))
            for o in raw.split(",")
        ),
        empty_ok=True,
        bad_examples=("app.example.com",),
    ),
    Setting.number(
        "RAGLINE_SSE_HEARTBEAT_S",
        float,
        minimum=0,
        exclusive=True,
        maximum=MAX_SECONDS,
        unit="seconds",
    ),
    Setting.number(
        "RAGLINE_SYNC_POLL_S", float, minimum=0, exclusive=True, maximum=MAX_SECONDS, unit="seconds"
    ),
    Setting.url("QDRANT_URL", _HTTP),
    Setting.text("QDRANT_API_KEY", accepts="a Qdrant API key"),
)
