"""The LangChain and LlamaIndex retrievers (:mod:`stages.client.langchain_retriever`,
:mod:`stages.client.llamaindex_retriever`) against a live ``ragline serve`` over the
ingested samples: LangChain's standard retriever suite (``langchain-tests``), each
framework's own types with ragline's citation, and a query through LlamaIndex's
``RetrieverQueryEngine`` with its mock LLM."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from bench.harness.cli import Cli
from bench.harness.db import Databases
from bench.harness.fake_cohere import FakeCohere
from bench.harness.serve import running_server
from stages.client import BadRequest, Client
from stages.client.langchain_retriever import RaglineRetriever
from stages.client.llamaindex_retriever import RaglineLlamaRetriever
from tests.support.pipeline_env import FAKE_DIMS, cohere_env

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
QUERY = "lighthouse lens"
#: The live server's URL, for the standard suite's constructor parameters (a property).
LIVE: dict[str, str] = {}
CITATION = {"file", "uri", "page", "pages", "section", "document_id", "chunk_id", "score"}


@pytest.fixture(scope="module", autouse=True)
def live(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The four samples ingested (every stage run), and serve over them."""
    tmp = tmp_path_factory.mktemp("retrievers")
    with FakeCohere(dims=FAKE_DIMS) as cohere, databases.fresh() as dsn:
        cli = Cli(dsn, tmp / "data", tmp / "logs", **cohere_env(cohere))
        ingested = cli.run("ingest", str(SAMPLES), "--json", timeout_s=110)
        assert ingested.code == 0, ingested
        with running_server(cli) as server:
            LIVE["url"] = server.url
            yield server.url
            LIVE.clear()


pytestmark = pytest.mark.anyio


class TestRaglineRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's standard retriever tests, unchanged."""

    @property
    def retriever_constructor(self) -> type[RaglineRetriever]:
        return RaglineRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"base_url": LIVE["url"], "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


def check_citation(meta: dict[str, Any], text: str) -> None:
    assert set(meta) >= CITATION, meta
    assert meta["file"].endswith((".pdf", ".md")) and meta["page"] >= 1
    assert meta["chunk_id"].startswith(meta["document_id"] + ":")
    assert isinstance(meta["score"], float) and text


def test_langchain_documents_carry_the_citation(live: str) -> None:
    docs = RaglineRetriever(base_url=live, k=3).invoke(QUERY)
    assert len(docs) == 3 and all(isinstance(d, Document) for d in docs)
    for doc in docs:
        check_citation(doc.metadata, doc.page_content)
        assert doc.id == doc.metadata["chunk_id"]
    assert docs[0].metadata["file"] == "lighthouses.pdf"
    with Client(live) as client:
        [hit] = client.search(QUERY, k=1)
    assert docs[0].page_content == hit.text and docs[0].metadata["score"] == hit.score


async def test_langchain_filters_and_async(live: str) -> None:
    only = RaglineRetriever(base_url=live, k=5, filters={"types": ["text/markdown"]})
    docs = await only.ainvoke(QUERY)
    assert docs and {d.metadata["file"] for d in docs} == {"tides.md"}
    with pytest.raises(BadRequest, match="unknown search filter 'colour'"):
        RaglineRetriever(base_url=live, filters={"colour": "red"}).invoke(QUERY)


def test_llamaindex_nodes_carry_the_citation(live: str) -> None:
    nodes = RaglineLlamaRetriever(live, k=3).retrieve(QUERY)
    assert len(nodes) == 3 and all(isinstance(n, NodeWithScore) for n in nodes)
    for found in nodes:
        node = found.node
        assert isinstance(node, TextNode) and found.score == node.metadata["score"]
        check_citation(node.metadata, node.get_content())
        assert node.node_id == node.metadata["chunk_id"]
        # The model is shown where the text comes from, not ids or scores.
        shown = node.get_content(metadata_mode=MetadataMode.LLM)
        assert f"file: {node.metadata['file']}" in shown and "chunk_id" not in shown
    assert nodes[0].node.metadata["file"] == "lighthouses.pdf"


async def test_llamaindex_async_with_filters(live: str) -> None:
    retriever = RaglineLlamaRetriever(live, k=4, filters={"pages": "1", "path": "sourdough"})
    nodes = await retriever.aretrieve(QUERY)
    assert nodes and {n.node.metadata["file"] for n in nodes} == {"sourdough.pdf"}
    assert {n.node.metadata["page"] for n in nodes} == {1}


def test_llamaindex_query_engine_with_a_mock_llm(live: str) -> None:
    """RetrieverQueryEngine asks the retriever, puts the chunks in the prompt and returns
    them as the answer's sources; MockLLM echoes the prompt, so the answer shows what
    the model was given."""
    engine = RetrieverQueryEngine.from_args(RaglineLlamaRetriever(live, k=2), llm=MockLLM())
    response = engine.query("What does a lighthouse lens do?")
    assert len(response.source_nodes) == 2
    first = response.source_nodes[0].node
    assert first.metadata["file"] == "lighthouses.pdf"
    answer = str(response)
    assert first.get_content() in answer and "file: lighthouses.pdf" in answer
