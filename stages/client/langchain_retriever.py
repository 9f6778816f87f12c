"""LangChain's retriever over ragline: ``pip install 'ragline[langchain]'``.

:class:`RaglineRetriever` asks a running ``ragline serve`` (through
:class:`stages.client.Client`, or :class:`stages.client.AsyncClient` for ``ainvoke``) and
returns LangChain's own ``Document``, its text the chunk's and its metadata ragline's
citation (:func:`stages.client.citation`: file, uri, pages, section, document and chunk
ids, score). ``k`` may also be given per call: ``retriever.invoke("query", k=3)``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, SecretStr

from stages.client import _core
from stages.client.aio import AsyncClient
from stages.client.sync import Client
from stages.ports.http import Answer


class RaglineRetriever(BaseRetriever):
    """The ``k`` best chunks of a ragline index for a query, as LangChain documents.

    ``RaglineRetriever(base_url="http://127.0.0.1:8000", token=..., k=4,
    collection="manuals", mode="hybrid", filters={"meta": {"team": "a"}})``; ``filters``
    takes search's filters by the names of :meth:`stages.client.Client.search`'s
    arguments. Pass ``client`` (and ``async_client``) to share connections; else each call
    opens its own.
    """

    base_url: str = "http://127.0.0.1:8000"
    token: SecretStr | None = None
    k: int = 4
    collection: str | None = None
    mode: str | None = None
    filters: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = 30.0
    client: Client | None = Field(default=None, exclude=True)
    async_client: AsyncClient | None = Field(default=None, exclude=True)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, options = self._options(kwargs)
        if self.client is not None:
            return _documents(self.client.search(query, k=k, **options))
        with Client(self.base_url, token=self._token(), timeout_s=self.timeout_s) as client:
            return _documents(client.search(query, k=k, **options))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, options = self._options(kwargs)
        if self.async_client is not None:
            return _documents(await self.async_client.search(query, k=k, **options))
        async with AsyncClient(
            self.base_url, token=self._token(), timeout_s=self.timeout_s
        ) as client:
            return _documents(await client.search(query, k=k, **options))

    def _options(self, kwargs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``k`` and search's keyword arguments: the retriever's, then the call's."""
        given = dict(kwargs)
        k = int(given.pop("k", self.k))
        options = _core.checked_filters({**self.filters, **given})
        options.update(collection=self.collection, mode=self.mode)
        return k, options

    def _token(self) -> str | None:
        return self.token.get_secret_value() if self.token is not None else None


def _documents(hits: list[Answer]) -> list[Document]:
    return [
        Document(page_content=hit.text, metadata=_core.citation(hit), id=hit.chunk_id)
        for hit in hits
    ]
