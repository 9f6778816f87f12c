"""Cohere's ``/v2/rerank`` (or any compatible endpoint at ``COHERE_BASE_URL``) as a
:class:`stages.ports.reranker.Reranker`; the SDK's retries off, as for embed: search
calls it once through the provider gate and falls back to the fused order."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from runtime.api import ConfigurationError, TransientError
from stages.adapters.cohere import CohereAdapter, translated


class CohereRerankerConfig(msgspec.Struct, frozen=True, kw_only=True):
    api_key: str
    base_url: str | None = None
    model: str = "rerank-v3.5"
    #: A search waits for the reranker at most this long, then answers in fused order.
    timeout_s: float = 10.0


class CohereReranker(CohereAdapter):
    """:class:`Reranker` backed by Cohere's rerank API."""

    def __init__(self, config: CohereRerankerConfig) -> None:
        if config.timeout_s <= 0:
            raise ConfigurationError("cohere reranker: timeout_s must be > 0")
        super().__init__(config.api_key, config.base_url, config.timeout_s)
        self.config = config

    @property
    def model(self) -> str:
        return f"cohere/{self.config.model}"

    async def rerank(self, query: str, texts: Sequence[str], top_n: int) -> list[tuple[int, float]]:
        if not texts:
            return []
        with translated("cohere rerank"):
            answer = await self._client.rerank(
                model=self.config.model,
                query=query,
                documents=list(texts),
                top_n=min(top_n, len(texts)),
            )
        order = [(r.index, float(r.relevance_score)) for r in answer.results]
        if any(not 0 <= i < len(texts) for i, _ in order):
            raise TransientError("cohere rerank: an answer named a text it was not given")
        return order
