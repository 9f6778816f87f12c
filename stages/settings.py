"""The pipeline's settings: the table (the README's configuration table, second part) and
the typed values read through it.

The engine checks these rows, with its own (:data:`runtime.settings.ENGINE_SETTINGS`),
before it starts anything. Add a variable here as one row. Every ``RAGLINE_*``,
``COHERE_*``, ``MINIO_*`` and ``QDRANT_*`` variable the pipeline uses is read here, by
:meth:`PipelineSettings.from_env` through those rows, so a bad value is the same one line
(exit 2) wherever it is met; the adapters take the typed structs. Settings that depend on
each other (``RAGLINE_EMBEDDER=cohere`` needs ``COHERE_API_KEY``) are checked when the
services are built, which ``Services.prepare`` does at start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import msgspec

from runtime.api import ConfigurationError, EnvReader, Setting
from stages.parsing.formats.unit import (
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MIN_IMAGE_BYTES,
    DEFAULT_MIN_IMAGE_PX,
)
from stages.parsing.limits import (
    DEFAULT_PARSE_CPU_S,
    DEFAULT_PARSE_MAX_CHARS,
    DEFAULT_PARSE_MEMORY_MB,
)
from stages.text.chunking import MIN_CHUNK_TOKENS, ChunkConfig

#: Embedding requests per minute to a metered provider, fleet-wide (0: unlimited).
DEFAULT_EMBED_RPM = 1000
#: Tokens per minute to the embedding provider, fleet-wide (0: unlimited).
DEFAULT_EMBED_TPM = 0
#: Vision requests per minute, fleet-wide (0: unlimited).
DEFAULT_VISION_RPM = 0
#: The local embedding model's key (as `Embedder.model` spells it); `local` names it too.
LOCAL_EMBEDDER_KEY = "local/all-MiniLM-L6-v2-int8"

_HTTP = ("http", "https")

#: A principal's name (``stages.actions.metadata.check_principals`` takes the same).
_PRINCIPAL = re.compile(r"[A-Za-z0-9_.@-]{1,128}")


def _token_entries_ok(entries: list[str]) -> bool:
    """RAGLINE_API_TOKENS's entries: ``TOKEN`` or ``TOKEN:a+b``, no token twice
    (``stages.serve.config.api_tokens`` reads them)."""
    secrets = [e.partition(":")[0] for e in entries]
    return len(set(secrets)) == len(secrets) and all(
        secret and (not colon or all(_PRINCIPAL.fullmatch(n) for n in names.split("+")))
        for secret, colon, names in (e.partition(":") for e in entries)
    )


PIPELINE_SETTINGS: tuple[Setting, ...] = (
    Setting.text("COHERE_API_KEY", accepts="a Cohere API key"),
    Setting.url("COHERE_BASE_URL", _HTTP),
    Setting.choice("RAGLINE_EMBEDDER", ("local", "cohere")),
    Setting.text("RAGLINE_EMBED_MODEL", accepts="a Cohere embedding model name"),
    Setting.number("RAGLINE_EMBED_DIMENSIONS", int, minimum=1, maximum=65_536),
    Setting.seconds("RAGLINE_EMBED_TIMEOUT_S"),
    Setting.number("RAGLINE_EMBED_RPM", int, minimum=0, unit="requests per minute, 0: unlimited"),
    Setting.number("RAGLINE_EMBED_TPM", int, minimum=0, unit="tokens per minute, 0: unlimited"),
    Setting.number("RAGLINE_VISION_RPM", int, minimum=0, unit="requests per minute, 0: unlimited"),
    Setting.choice("RAGLINE_VISION", ("ocr", "cohere", "none")),
    Setting.text("RAGLINE_VISION_MODEL", accepts="a Cohere vision model name"),
    Setting.seconds("RAGLINE_VISION_TIMEOUT_S"),
    Setting.choice("RAGLINE_RERANK", ("none", "cohere")),
    Setting.text("RAGLINE_RERANK_MODEL", accepts="a Cohere rerank model name"),
    Setting.seconds("RAGLINE_RERANK_TIMEOUT_S"),
    Setting.number("RAGLINE_RERANK_RPM", int, minimum=0, unit="requests per minute, 0: unlimited"),
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
    # The parser process's limits per document (stages/parsing/limits.py): below 512 MB
    # its own start-up (~260 MB of address space) would leave a document next to nothing.
    Setting.number(
        "RAGLINE_PARSE_MEMORY_MB", int, minimum=512, maximum=1_048_576, unit="megabytes"
    ),
    Setting.number("RAGLINE_PARSE_CPU_S", int, minimum=1, maximum=86_400, unit="CPU seconds"),
    Setting.number("RAGLINE_PARSE_MAX_CHARS", int, minimum=1_000, unit="characters"),
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
        accepts="comma-separated bearer tokens, each TOKEN or TOKEN:principal+principal "
        "(principals: 1-128 letters, digits or _.@-), none empty, none twice",
        check=lambda raw: _token_entries_ok([t.strip() for t in raw.split(",")]),
        bad_examples=("", ",", "a,,b", ":p", "a:", "a:p+", "a:p q", "a,a:p"),
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
    Setting(
        name="RAGLINE_ALLOWED_HOSTS",
        accepts="comma-separated host names such as ragline.example.com, or *",
        check=lambda raw: all(h.strip() and "/" not in h for h in raw.split(",")),
        bad_examples=("", "https://example.com", "a,,b"),
    ),
    Setting.seconds("RAGLINE_SSE_HEARTBEAT_S"),
    Setting.seconds("RAGLINE_SYNC_POLL_S"),
    Setting.number(
        "RAGLINE_SYNC_DELETE_SHARE",
        float,
        minimum=0,
        maximum=1,
        unit="share of a source's documents",
    ),
    Setting.url("QDRANT_URL", _HTTP),
    Setting.text("QDRANT_API_KEY", accepts="a Qdrant API key"),
)


# -- typed values --------------------------------------------------------------------------


class CohereKnobs(msgspec.Struct, frozen=True, kw_only=True):
    """The Cohere knobs of a service (None: the adapter's default)."""

    api_key: str | None = None
    base_url: str | None = None
    model: str | None = None
    timeout_s: float | None = None


class EmbedSettings(CohereKnobs, frozen=True, kw_only=True):
    """Which embedder, and its Cohere knobs."""

    #: ``local`` or ``cohere``; unset, ``cohere`` when ``COHERE_API_KEY`` is set.
    kind: str = "local"
    dimensions: int | None = None


class VisionSettings(CohereKnobs, frozen=True, kw_only=True):
    """Which vision model, and its Cohere knobs."""

    #: ``none``, ``ocr`` or ``cohere``; unset, ``cohere`` only when both
    #: ``RAGLINE_VISION_MODEL`` and ``COHERE_API_KEY`` are set (a chat call per image costs
    #: far more than embedding, so a key given for embeddings alone does not switch it on).
    kind: str = "ocr"


class RerankSettings(CohereKnobs, frozen=True, kw_only=True):
    """Which reranker search uses (``none``: the fused order stands), and its knobs."""

    kind: str = "none"


class MinioConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Connection settings for :class:`stages.adapters.assets.minio.MinioStore`."""

    endpoint: str
    access_key: str | None = None
    secret_key: str | None = None
    bucket: str = "ragline"
    secure: bool = False
    region: str | None = None
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    #: Retries of connection errors and 5xx inside urllib3, before ragline's own retry.
    http_retries: int = 2


class QdrantSettings(msgspec.Struct, frozen=True, kw_only=True):
    """A Qdrant server (``QDRANT_URL``); unset, the embedded index is used."""

    url: str
    api_key: str | None = None


class PipelineSettings(msgspec.Struct, frozen=True, kw_only=True):
    chunk: ChunkConfig = msgspec.field(default_factory=ChunkConfig)
    min_image_px: int = DEFAULT_MIN_IMAGE_PX
    min_image_bytes: int = DEFAULT_MIN_IMAGE_BYTES
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    #: The parser process's address space while it reads a document, in MB.
    parse_memory_mb: int = DEFAULT_PARSE_MEMORY_MB
    #: CPU seconds a document may take in the parser process.
    parse_cpu_s: int = DEFAULT_PARSE_CPU_S
    #: Characters of text a document may have (the parser stops reading past them).
    parse_max_chars: int = DEFAULT_PARSE_MAX_CHARS
    #: Embedding requests per minute to a metered provider, shared by every process on
    #: the database (0: unlimited).
    embed_rpm: int = DEFAULT_EMBED_RPM
    #: Embedding tokens per minute, fleet-wide (estimated before each call; 0: unlimited).
    embed_tpm: int = DEFAULT_EMBED_TPM
    #: Vision requests per minute to a hosted vision model, fleet-wide (0: unlimited).
    vision_rpm: int = DEFAULT_VISION_RPM
    embed: EmbedSettings = msgspec.field(default_factory=EmbedSettings)
    vision: VisionSettings = msgspec.field(default_factory=VisionSettings)
    rerank: RerankSettings = msgspec.field(default_factory=RerankSettings)
    #: Rerank requests per minute, fleet-wide (0: unlimited).
    rerank_rpm: int = 0
    #: None: the directory store under the data dir.
    minio: MinioConfig | None = None
    #: None: the embedded vector index under the data dir.
    qdrant: QdrantSettings | None = None

    def __post_init__(self) -> None:
        for name, value in (
            ("RAGLINE_EMBED_RPM", self.embed_rpm),
            ("RAGLINE_EMBED_TPM", self.embed_tpm),
            ("RAGLINE_VISION_RPM", self.vision_rpm),
        ):
            if value < 0:
                raise ConfigurationError(f"{name} must be >= 0 (0: unlimited), got {value}")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> PipelineSettings:
        """Read every pipeline variable through its row in :data:`PIPELINE_SETTINGS`."""
        read = EnvReader(env, PIPELINE_SETTINGS)
        _refuse_gone(env)
        return cls(
            chunk=_chunk(read),
            min_image_px=read.integer("RAGLINE_MIN_IMAGE_PX", DEFAULT_MIN_IMAGE_PX),
            max_image_pixels=read.integer("RAGLINE_MAX_IMAGE_PIXELS", DEFAULT_MAX_IMAGE_PIXELS),
            parse_memory_mb=read.integer("RAGLINE_PARSE_MEMORY_MB", DEFAULT_PARSE_MEMORY_MB),
            parse_cpu_s=read.integer("RAGLINE_PARSE_CPU_S", DEFAULT_PARSE_CPU_S),
            parse_max_chars=read.integer("RAGLINE_PARSE_MAX_CHARS", DEFAULT_PARSE_MAX_CHARS),
            embed_rpm=read.integer("RAGLINE_EMBED_RPM", DEFAULT_EMBED_RPM),
            embed_tpm=read.integer("RAGLINE_EMBED_TPM", DEFAULT_EMBED_TPM),
            vision_rpm=read.integer("RAGLINE_VISION_RPM", DEFAULT_VISION_RPM),
            embed=_embed(read),
            vision=_vision(read),
            rerank=_rerank(read),
            rerank_rpm=read.integer("RAGLINE_RERANK_RPM", 0),
            minio=_minio(read),
            qdrant=_qdrant(read),
        )


def _refuse_gone(env: Mapping[str, str]) -> None:
    for gone in ("RAGLINE_CHUNK_CHARS", "RAGLINE_CHUNK_OVERLAP"):
        if env.get(gone, "").strip():
            raise ConfigurationError(
                f"{gone} is no longer read: chunks are sized in the embedder's tokens; "
                "set RAGLINE_CHUNK_TOKENS / RAGLINE_CHUNK_OVERLAP_TOKENS"
            )


def _chunk(read: EnvReader) -> ChunkConfig:
    chunk = ChunkConfig(
        max_tokens=read.optional_integer("RAGLINE_CHUNK_TOKENS"),
        overlap_tokens=read.optional_integer("RAGLINE_CHUNK_OVERLAP_TOKENS"),
    )
    if chunk.max_tokens is not None:
        try:  # refuse a bad combination now, not per job
            chunk.sizes(chunk.max_tokens)
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"RAGLINE_CHUNK_TOKENS={chunk.max_tokens} / RAGLINE_CHUNK_OVERLAP_TOKENS="
                f"{chunk.overlap_tokens}: {exc}"
            ) from exc
    return chunk


def _embed(read: EnvReader) -> EmbedSettings:
    knobs = _cohere(read, "RAGLINE_EMBED_MODEL", "RAGLINE_EMBED_TIMEOUT_S")
    return EmbedSettings(
        kind=read.choice("RAGLINE_EMBEDDER", "cohere" if knobs.api_key else "local"),
        dimensions=read.optional_integer("RAGLINE_EMBED_DIMENSIONS"),
        **msgspec.structs.asdict(knobs),
    )


def _vision(read: EnvReader) -> VisionSettings:
    knobs = _cohere(read, "RAGLINE_VISION_MODEL", "RAGLINE_VISION_TIMEOUT_S")
    return VisionSettings(
        kind=read.choice("RAGLINE_VISION", "cohere" if knobs.api_key and knobs.model else "ocr"),
        **msgspec.structs.asdict(knobs),
    )


def _rerank(read: EnvReader) -> RerankSettings:
    knobs = _cohere(read, "RAGLINE_RERANK_MODEL", "RAGLINE_RERANK_TIMEOUT_S")
    return RerankSettings(
        kind=read.choice("RAGLINE_RERANK", "none"), **msgspec.structs.asdict(knobs)
    )


def _cohere(read: EnvReader, model: str, timeout_s: str) -> CohereKnobs:
    return CohereKnobs(
        api_key=read.text("COHERE_API_KEY"),
        base_url=read.text("COHERE_BASE_URL"),
        model=read.text(model),
        timeout_s=_optional_number(read, timeout_s),
    )


def _minio(read: EnvReader) -> MinioConfig | None:
    # Every variable is read (and so checked) even when unused, as the start-up check does.
    endpoint = read.text("MINIO_ENDPOINT")
    access_key, secret_key = read.text("MINIO_ACCESS_KEY"), read.text("MINIO_SECRET_KEY")
    bucket, secure = read.text("MINIO_BUCKET") or "ragline", read.flag("MINIO_SECURE", False)
    if endpoint is None:
        return None
    return MinioConfig(
        endpoint=endpoint,
        access_key=access_key,
        secret_key=secret_key,
        bucket=bucket,
        secure=secure,
    )


def _qdrant(read: EnvReader) -> QdrantSettings | None:
    url, api_key = read.text("QDRANT_URL"), read.text("QDRANT_API_KEY")
    return None if url is None else QdrantSettings(url=url, api_key=api_key)


def _optional_number(read: EnvReader, name: str) -> float | None:
    raw = read.raw(name)
    return None if raw is None else float(raw)
