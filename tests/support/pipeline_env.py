"""The real pipeline in one test: services, in-process workers, and the checks the
integration tests share (points in the index against chunk rows in PostgreSQL).

A :class:`PipelineEnv` owns a pool on the test's database, a data dir (asset store and
embedded vector index) and the environment the services are built from. Every
:meth:`PipelineEnv.run` builds fresh services, as a worker process would: the worker
closes them when it stops. :attr:`PipelineEnv.probe` is a separate set of services the
test uses to look into the index and to embed queries.

    async with pipeline_env(dsn, tmp_path, RAGLINE_VISION="none") as env:
        doc = await env.submit(sample("sourdough.pdf"))
        await env.run()
        await env.assert_indexed(doc.document_id)
"""

# PyMuPDF's API is only partly typed.
# mypy: disallow-untyped-calls=False

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import pymupdf
import qdrant_edge as qe

from bench.harness.fake_cohere import FakeCohere
from runtime.jobs.documents import DocumentRepository, Submitted
from runtime.jobs.postgres import JobRepository
from runtime.models import Document, JobRow, NewJob
from runtime.worker.config import WorkerConfig
from runtime.worker.worker import Worker
from stages.actions.submit import submit
from stages.db import checkpoints
from stages.pipeline import STAGES, pipeline_for
from stages.ports.vector_index import PointRef, Query, point_id
from stages.services import Services

REPO = Path(__file__).resolve().parents[2]
SAMPLES_DIR = REPO / "samples"
#: Sample file → a query that must find it first, and a line its figure carries (OCR).
SAMPLES: dict[str, tuple[str, str]] = {
    "lighthouses.pdf": ("lighthouse lens", "FRESNEL LENS 20 NM"),
    "sourdough.pdf": ("sourdough starter", "SOURDOUGH STARTER"),
    "rust-borrow-checker.pdf": ("borrow checker", "BORROW CHECKER"),
}
#: Vector size the fake Cohere server returns in these tests (small: fast and enough).
FAKE_DIMS = 64
#: Jobs in flight per stage in test workers.
TEST_CONCURRENCY = {"parse": 2, "chunk": 2, "vision": 1, "embed": 2, "index": 2}


def sample(name: str) -> Path:
    return SAMPLES_DIR / name


def copy_sample(name: str, target: Path) -> Path:
    """A copy of a sample under another name (the document's filename is the path's)."""
    target.write_bytes(sample(name).read_bytes())
    return target


def long_pdf(path: Path, paragraphs: int, *, seed: str = "") -> Path:
    """A text-only PDF of ``paragraphs`` distinct paragraphs (~300 characters each)."""
    doc = pymupdf.open()
    per_page = 8
    for first in range(0, paragraphs, per_page):
        page = doc.new_page()
        text = "\n\n".join(
            _paragraph(i, seed) for i in range(first, min(first + per_page, paragraphs))
        )
        page.insert_textbox(pymupdf.Rect(50, 50, 545, 800), text, fontsize=9)
    doc.save(path)
    doc.close()
    return path


def _paragraph(i: int, seed: str) -> str:
    return (
        f"Paragraph {i}{seed}. The harbour master logged vessel number {i * 7919 % 10007} "
        f"entering at tide mark {i % 13}. Cargo manifest {i * 31} listed crates of tea, "
        f"copper wire and {i % 5 + 2} barrels of oil; the pilot noted fog {i % 3} times "
        "before the breakwater."
    )


def tool_env(**extra: str) -> dict[str, str]:
    """The process environment minus ragline's and Cohere's knobs, plus ``extra``."""
    skip = ("RAGLINE_", "COHERE_", "QDRANT_", "MINIO_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env.update(extra)
    return env


def cohere_env(server: FakeCohere, **extra: str) -> dict[str, str]:
    """Environment for the Cohere embedder against ``server`` (no OCR)."""
    return {
        "COHERE_API_KEY": "test-key",
        "COHERE_BASE_URL": server.base_url,
        "RAGLINE_EMBEDDER": "cohere",
        "RAGLINE_EMBED_DIMENSIONS": str(FAKE_DIMS),
        "RAGLINE_VISION": "none",
        **extra,
    }


class TimedCohere(FakeCohere):
    """A FakeCohere that also notes when each request to an endpoint arrived."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arrivals: dict[str, list[float]] = {}
        self._arrivals_lock = threading.Lock()

    def next_fault(self, endpoint: str) -> Any:
        with self._arrivals_lock:
            self.arrivals.setdefault(endpoint, []).append(time.monotonic())
        return super().next_fault(endpoint)


class PipelineEnv:
    """The pipeline under test: see the module docstring."""

    def __init__(self, dsn: str, data_dir: Path, env: Mapping[str, str], pool: Any) -> None:
        self.dsn = dsn
        self.data_dir = data_dir
        self.env = dict(env)
        self.pool: asyncpg.Pool[Any] = pool
        self.docs = DocumentRepository(pool)
        self.jobs = JobRepository(pool)
        self.probe = Services(self.env, data_dir)

    def services(self, **overrides: str) -> Services:
        return Services({**self.env, **overrides}, self.data_dir)

    async def submit(self, path: Path, *, force: bool = False, max_attempts: int = 3) -> Submitted:
        return await submit(
            self.pool, self.probe.assets, path, force=force, max_attempts=max_attempts
        )

    async def submit_all(self, paths: Iterable[Path], **kwargs: Any) -> list[uuid.UUID]:
        return [(await self.submit(p, **kwargs)).document_id for p in paths]

    async def run(
        self,
        stages: tuple[str, ...] = STAGES,
        *,
        timeout_s: float = 60,
        env: Mapping[str, str] | None = None,
        **config: Any,
    ) -> None:
        """Run an in-process worker over fresh services until no job of ``stages`` is left."""
        services = self.services(**(env or {}))
        settings: dict[str, Any] = {
            "stages": stages,
            "concurrency": {s: TEST_CONCURRENCY[s] for s in stages},
            "exit_when_idle": True,
            "poll_s": 0.2,
            "retry_base_s": 0.05,
            "rescue_every_s": 1.0,
        }
        settings.update(config)
        worker = Worker(pipeline_for(services), self.dsn, WorkerConfig(**settings))
        with anyio.fail_after(timeout_s):
            await worker.run()

    # -- what PostgreSQL says ---------------------------------------------------------------

    async def doc(self, doc_id: uuid.UUID) -> Document:
        found = await self.docs.get(doc_id)
        assert found is not None, f"no document {doc_id}"
        return found

    async def statuses(self, ids: Iterable[uuid.UUID]) -> dict[str, str]:
        """Filename → status of each document."""
        return {d.filename: str(d.status) for d in await self.docs.get_many(list(ids))}

    async def stage_jobs(self, doc_id: uuid.UUID, stage: str | None = None) -> list[JobRow]:
        rows = await self.jobs.document_jobs(doc_id)
        return [r for r in rows if stage is None or r.stage == stage]

    async def job_count(self, stage: str) -> int:
        return int(
            await self.pool.fetchval("SELECT count(*) FROM stage_jobs WHERE stage = $1", stage)
        )

    async def chunks(self, doc_id: uuid.UUID) -> list[checkpoints.ChunkRow]:
        return await checkpoints.chunks(self.pool, doc_id)

    async def doc_assets(self, doc_id: uuid.UUID) -> list[checkpoints.Asset]:
        return await checkpoints.assets(self.pool, doc_id)

    async def embeddings(self, model: str) -> int:
        return int(
            await self.pool.fetchval("SELECT count(*) FROM embeddings WHERE model = $1", model)
        )

    async def enqueue_index(self, doc_id: uuid.UUID) -> None:
        """An index job for the document's current generation (no new generation)."""
        doc = await self.doc(doc_id)
        job = NewJob(document_id=doc_id, stage="index", generation=doc.generation)
        assert await self.jobs.enqueue([job]) == 1

    # -- what the vector index says ---------------------------------------------------------

    async def points(self, doc_id: uuid.UUID) -> list[PointRef]:
        return await self.probe.index.scan(self.probe.vector_collection, doc_id)

    async def count_points(self, doc_id: uuid.UUID | None = None) -> int:
        return await self.probe.index.count(self.probe.vector_collection, doc_id)

    async def assert_indexed(self, doc_id: uuid.UUID) -> int:
        """Exactly one point per chunk row, each of the document's generation; returns
        the number of points."""
        doc = await self.doc(doc_id)
        chunks = await self.chunks(doc_id)
        refs = await self.points(doc_id)
        expected = {point_id(doc_id, c.ordinal) for c in chunks}
        assert await self.count_points(doc_id) == len(chunks) == len(refs), doc.filename
        assert {r.id for r in refs} == expected, doc.filename
        assert {r.generation for r in refs} == {doc.generation}, doc.filename
        assert {c.generation for c in chunks} <= {g for g in range(1, doc.generation + 1)}
        return len(refs)

    async def search_first(self, query: str) -> str:
        """Filename of the best hit for ``query``."""
        [vector] = await self.probe.embedder.embed([query], "search_query")
        hits = await self.probe.index.search(self.probe.vector_collection, Query(vector=vector), 5)
        assert hits, f"no hits for {query!r}"
        return str(hits[0].payload["filename"])

    def delete_point_directly(self, doc_id: uuid.UUID, ordinal: int) -> None:
        """Remove one point from the embedded index behind ragline's back (EdgeIndex's
        lock and shard layout: ``<data_dir>/qdrant/<collection>``)."""
        root = self.data_dir / "qdrant"
        collection = self.probe.vector_collection
        fd = os.open(root / f"{collection}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            shard = qe.EdgeShard.load(str(root / collection))
            try:
                shard.update(qe.UpdateOperation.delete_points([point_id(doc_id, ordinal)]))
                shard.flush()
            finally:
                shard.close()
        finally:
            os.close(fd)


@contextlib.asynccontextmanager
async def pipeline_env(dsn: str, data_dir: Path, **env: str) -> AsyncIterator[PipelineEnv]:
    async with asyncpg.create_pool(dsn, min_size=1, max_size=4) as pool:
        penv = PipelineEnv(dsn, data_dir, tool_env(**env), pool)
        try:
            yield penv
        finally:
            await penv.probe.aclose()
