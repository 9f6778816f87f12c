"""What bench.serve's parts share: options, throwaway databases, servers, upload sets."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import asyncpg
import httpx
import msgspec

from bench.harness.cli import Cli
from bench.harness.db import throwaway_database, with_database
from bench.harness.serve import Server, running_server
from runtime.db.migrate import migrate

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus" / "cache" / "pdfs"
SAMPLES = REPO / "samples"
PARTS = ("engine", "upload", "sse", "status", "search", "rss")


class Options(msgspec.Struct, frozen=True, kw_only=True):
    server_dsn: str
    parts: tuple[str, ...] = PARTS
    engine_docs: int = 2000
    engine_slots: int = 4
    repeat: int = 3
    uploads: int = 200
    sse_events: int = 500
    status_s: float = 5.0
    points: int = 100_000
    searches: int = 200
    big_mb: int = 1024


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def verdict(ok: bool) -> str:
    return "ok" if ok else "BELOW"


# -- databases -------------------------------------------------------------------------------


async def create_db(server_dsn: str) -> str:
    name = f"ragline_bserve_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    dsn = with_database(server_dsn, name)
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return name


async def drop_db(server_dsn: str, name: str) -> None:
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


@asynccontextmanager
async def bench_db(server_dsn: str) -> AsyncIterator[str]:
    name = await create_db(server_dsn)
    try:
        yield with_database(server_dsn, name)
    finally:
        with anyio.CancelScope(shield=True):
            await drop_db(server_dsn, name)


@contextmanager
def served(opts: Options, tmp: Path, *args: str, **env: str) -> Iterator[tuple[Server, Cli]]:
    with throwaway_database(opts.server_dsn, "ragline_bserve") as dsn:
        cli = Cli(dsn, tmp / "data", tmp / "logs")
        with running_server(cli, *args, **env) as server:
            yield server, cli


def upload_files(count: int, tmp: Path) -> list[Path]:
    corpus = sorted(CORPUS.glob("*.pdf")) if CORPUS.is_dir() else []
    files = corpus[:count]
    samples = sorted(SAMPLES.glob("*.pdf"))
    out = tmp / "generated"
    out.mkdir(exist_ok=True)
    for i in range(count - len(files)):
        src = samples[i % len(samples)]
        path = out / f"{src.stem}-{i}.pdf"
        path.write_bytes(src.read_bytes() + f"\n% copy {i}\n".encode())
        files.append(path)
    return files


async def http_uploads(url: str, files: Sequence[Path], concurrency: int) -> float:
    queue = list(files)
    started = time.perf_counter()

    async def one(client: httpx.AsyncClient) -> None:
        while queue:
            path = queue.pop()
            with path.open("rb") as f:
                r = await client.post(
                    "/v1/documents",
                    content=f.read(),
                    headers={"Content-Disposition": f'attachment; filename="{path.name}"'},
                )
            if r.status_code not in (200, 202):
                raise RuntimeError(f"upload of {path.name}: {r.status_code} {r.text}")

    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as client,
        anyio.create_task_group() as tg,
    ):
        for _ in range(concurrency):
            tg.start_soon(one, client)
    return time.perf_counter() - started
