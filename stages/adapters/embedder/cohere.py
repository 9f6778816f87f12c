"""Cohere's ``/v2/embed`` (or any compatible endpoint at ``COHERE_BASE_URL``) as an
:class:`stages.ports.embedder.Embedder`, with the SDK's own retries off so the worker's
retry policy rules."""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from runtime.api import ConfigurationError, PermanentError, TransientError
from stages.adapters.cohere import CohereAdapter, translated
from stages.ports.embedder import InputType, l2_normalize

log = logging.getLogger(__name__)


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
