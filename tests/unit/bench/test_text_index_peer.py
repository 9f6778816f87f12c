"""bench.harness.retrieval_peer.QdrantTextIndex: qdrant-edge's BM25 text index as a keyword
side, over chunks, with CJK spelled out for its code tokenizer."""

from __future__ import annotations

import uuid
from pathlib import Path

from bench.harness.retrieval_peer import PeerChunk, PeerHit, QdrantTextIndex
from bench.harness.text_index import spelled_cjk


def test_cjk_runs_are_spelled_as_characters_and_pairs() -> None:
    assert spelled_cjk("Python入門 guide") == "Python 入 門 入門  guide"
    assert spelled_cjk("plain text") == "plain text"


def test_identifiers_parts_and_cjk_are_found(tmp_path: Path) -> None:
    doc = uuid.uuid4()
    texts = [
        "call asn1_der_decoding here",
        "asn1 der decoding as words",
        "getHTTPResponseCode returns",
        "中文分词测试的文本",
    ]
    chunks = [PeerChunk(doc, i, i + 1, i + 1, t, [0.0]) for i, t in enumerate(texts)]
    index = QdrantTextIndex(chunks, str(tmp_path / "shard"))
    try:
        assert index.search("asn1_der_decoding", 2)[0] == PeerHit(doc, 1, 1)
        assert index.search("response code", 1) == [PeerHit(doc, 3, 3)]
        assert index.search("分词", 1) == [PeerHit(doc, 4, 4)]
    finally:
        index.close()
