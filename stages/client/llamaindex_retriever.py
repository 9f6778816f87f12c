"""LlamaIndex's retriever over ragline: ``pip install 'ragline[llamaindex]'``.

:class:`RaglineLlamaRetriever` asks a running ``ragline serve`` (through
:class:`stages.client.Client`, or :class:`stages.client.AsyncClient` for ``aretrieve``)
and returns LlamaIndex's own ``NodeWithScore``: a ``TextNode`` with the chunk's text,
its id the chunk's (``<document id>:<ordinal>``), its metadata ragline's citation
(:func:`stages.client.citation`), and the hit's score. It plugs into
``RetrieverQueryEngine`` like any retriever. The model sees the file, pages and section
of each chunk (to cite them); ids and scores stay out of its prompt and of embeddings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from stages.client import _core
from stages.client.aio import AsyncClient
from stages.client.sync import Client
from stages.ports.http import Answer

#: Citation keys kept out of the model's prompt and of embeddings.
HIDDEN = ["document_id", "chunk_id", "score", "uri", "collection", "media_type", "kind"]


class RaglineLlamaRetriever(BaseRetriever):
    """The ``k`` best chunks of a ragline index for a query, as LlamaIndex nodes.

    ``RaglineLlamaRetriever(base_url="http://127.0.0.1:8000", token=..., k=4,
    collection="manuals", filters={"pages": "1-3"})``; ``filters`` takes search's filters
    by the names of :meth:`stages.client.Client.search`'s arguments. Pass ``client`` (and
    ``async_client``) to share connections; else each call opens its own.
    """

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        k: int = 4,
        collection: str | None = None,
        mode: str | None = None,
        filters: Mapping[str, Any] | None = None,
        timeout_s: float = 30.0,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        super().__init__(callback_manager=callback_manager)
        self.base_url = base_url
        self.k = k
        self.timeout_s = timeout_s
        self._token = token
        self._client = client
        self._async_client = async_client
        self._options = _core.checked_filters(filters or {})
        self._options.update(collection=collection, mode=mode)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = query_bundle.query_str
        if self._client is not None:
            return _nodes(self._client.search(query, k=self.k, **self._options))
        with Client(self.base_url, token=self._token, timeout_s=self.timeout_s) as client:
            return _nodes(client.search(query, k=self.k, **self._options))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = query_bundle.query_str
        if self._async_client is not None:
            return _nodes(await self._async_client.search(query, k=self.k, **self._options))
        async with AsyncClient(
            self.base_url, token=self._token, timeout_s=self.timeout_s
        ) as client:
            return _nodes(await client.search(query, k=self.k, **self._options))


def _nodes(hits: list[Answer]) -> list[NodeWithScore]:
    return [NodeWithScore(node=_node(hit), score=hit.score) for hit in hits]


def _node(hit: Answer) -> TextNode:
    return TextNode(
        id_=hit.chunk_id,
        text=hit.text,
        metadata=_core.citation(hit),
        excluded_llm_metadata_keys=HIDDEN,
        excluded_embed_metadata_keys=HIDDEN,
    )
