"""``python -m bench.harness.scale_verify DSN DOCUMENTS``: run ``verify`` over a database
that :mod:`bench.harness.scale_fill` filled with ``DOCUMENTS`` documents, and print its
time and report as JSON (``bench.scale`` runs it under ``bench.harness.rusage`` for the
peak RSS of this process alone).

The vector index and the asset store are stand-ins that agree with the fill: a ready
document's points are its chunks' (generation 1), every object exists, nothing is left
over. So the figure is verify's own cost (PostgreSQL's reads, the comparison, the memory it
holds), not a Qdrant server's or a disk's, and the report comes out clean.
"""

from __future__ import annotations

import functools
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import asyncpg

from bench.harness.scale_fill import CHUNKS, ID_BASE, state_of
from bench.standins import StandinServices
from stages.actions.verify import verify
from stages.adapters.assets.directory import DirStore
from stages.ports.assets import AssetStore
from stages.ports.vector_index import Hit, Point, PointRef, Query, VectorIndex, point_ids


def _number(document: uuid.UUID) -> int:
    return document.int - ID_BASE


def _tenant_of(n: int) -> str:
    return "team" if n % 10 == 3 else "default"


class FilledIndex(VectorIndex):
    """The points the fill's ready documents would have; read-only."""

    single_writer = False

    def __init__(self, documents: int) -> None:
        self.documents = documents

    def _refs(self, document: uuid.UUID, tenant: str | None) -> list[PointRef]:
        n = _number(document)
        if not 1 <= n <= self.documents or state_of(n)[0] != "ready":
            return []
        if tenant is not None and _tenant_of(n) != tenant:
            return []
        doc = str(document)
        ids = point_ids(document, range(CHUNKS))
        return [PointRef(id=i, document_id=doc, generation=1) for i in ids]

    async def scan(
        self,
        vector_collection: str,
        document_id: uuid.UUID | None = None,
        *,
        tenant: str | None = None,
        documents: Sequence[uuid.UUID] | None = None,
    ) -> list[PointRef]:
        if documents is None:
            documents = [document_id] if document_id else self._every()
        return [ref for d in documents for ref in self._refs(d, tenant)]

    def _every(self) -> list[uuid.UUID]:
        return [uuid.UUID(int=ID_BASE | n) for n in range(1, self.documents + 1)]

    async def count(self, vector_collection: str, document_id: uuid.UUID | None = None) -> int:
        if document_id is not None:
            return len(self._refs(document_id, None))
        return self._total

    @functools.cached_property
    def _total(self) -> int:
        ready = sum(1 for n in range(1, self.documents + 1) if state_of(n)[0] == "ready")
        return ready * CHUNKS

    async def vector_collections(self) -> list[str]:
        return []  # no other model's collection: the live one is what verify reads

    async def point_ids(self, vector_collection: str, document_id: uuid.UUID) -> list[uuid.UUID]:
        return [r.id for r in self._refs(document_id, None)]

    async def ensure_vector_collection(self, name: str, dimensions: int) -> None:
        return None

    async def reserve(self, vector_collection: str) -> None:
        return None

    async def upsert(self, vector_collection: str, points: Sequence[Point]) -> None:
        raise NotImplementedError

    async def replace_document(
        self,
        vector_collection: str,
        document_id: uuid.UUID,
        generation: int,
        points: Sequence[Point],
    ) -> None:
        raise NotImplementedError

    async def delete_document(
        self, vector_collection: str, document_id: uuid.UUID, *, keep_generation: int | None = None
    ) -> None:
        return None

    async def delete_generation(
        self, vector_collection: str, document_id: uuid.UUID, generation: int
    ) -> None:
        return None

    async def search(
        self, vector_collection: str, query: Query, limit: int, *, tenant: str | None = None
    ) -> list[Hit]:
        raise NotImplementedError

    async def drop_vector_collection(self, name: str) -> None:
        raise NotImplementedError

    async def point_alias(self, alias: str, vector_collection: str) -> None:
        return None

    async def has_keywords(self, vector_collection: str) -> bool:
        return True

    async def aclose(self) -> None:
        return None


class PresentStore(DirStore):
    """A directory store (empty: nothing listed, nothing left over) in which every key
    exists."""

    async def exists(self, key: str) -> bool:
        return True


class FilledServices(StandinServices):
    """The stand-in pipeline's services over a filled database: the index and the store
    above."""

    def __init__(self, data_dir: Path, documents: int) -> None:
        super().__init__({}, data_dir)
        self.documents = documents

    @functools.cached_property
    def index(self) -> VectorIndex:
        return FilledIndex(self.documents)

    @functools.cached_property
    def assets(self) -> AssetStore:
        return PresentStore(self.data_dir / "assets")


async def run(dsn: str, documents: int) -> dict[str, Any]:
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        with tempfile.TemporaryDirectory(prefix="ragline-scale-") as tmp:
            services = FilledServices(Path(tmp), documents)
            started = time.perf_counter()
            report = await verify(pool, services)
            seconds = time.perf_counter() - started
    finally:
        await pool.close()
    return {
        "seconds": seconds,
        "documents": report.documents,
        "points": report.points,
        "problems": len(report.problems),
        "clean": report.clean,
    }


def main(argv: list[str]) -> int:
    dsn, documents = argv[1], int(argv[2])
    print(json.dumps(anyio.run(run, dsn, documents)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
