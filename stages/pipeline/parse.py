"""parse: the original document → text per page (or section) and the images in it (stored
in the asset store).

PyMuPDF and the format readers (stages/formats) run in the worker's parser process
(:mod:`stages.parsing.process`), one document at a time, which streams the pages back so
memory stays flat in the page count; this stage stores each image as it arrives (keys
derive from the document id and the image's hash, so a retry overwrites its own objects).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import anyio.from_thread
import anyio.to_thread
import msgspec

from runtime.api import (
    DbConn,
    DocumentRepository,
    Job,
    JobContext,
    MissingInput,
)
from stages.db import checkpoints
from stages.parsing.formats.unit import Image, Unit
from stages.parsing.wire import ParseRequest
from stages.ports.assets import image_key
from stages.ports.services import Services
from stages.settings import PipelineSettings

TRIM_CACHE_EVERY_PAGES = 200


def parse_request(
    path: Path, filename: str, media_type: str, settings: PipelineSettings
) -> ParseRequest:
    """What the parser process is asked for one document, under the settings' limits."""
    s = settings
    return ParseRequest(
        path=str(path),
        filename=filename,
        media_type=media_type,
        min_image_px=s.min_image_px,
        min_image_bytes=s.min_image_bytes,
        max_image_pixels=s.max_image_pixels,
        # MuPDF's cache would grow to 256 MB on a long document; trimming it every
        # 200 pages keeps the parser's peak far lower for ~5% more CPU.
        trim_cache_every_pages=TRIM_CACHE_EVERY_PAGES,
        memory_mb=s.parse_memory_mb,
        cpu_s=s.parse_cpu_s,
        max_chars=s.parse_max_chars,
    )


class ParseOutput(msgspec.Struct, frozen=True):
    pages: list[checkpoints.Page]
    assets: list[checkpoints.Asset]


class ParseStage:
    name = "parse"

    def __init__(self, services: Services) -> None:
        self.services = services
        self._cpu: anyio.CapacityLimiter | None = None

    async def process(self, ctx: JobContext) -> ParseOutput:
        job = ctx.job
        doc = await DocumentRepository(ctx.pool).get(job.document_id)
        if doc is None or not doc.asset_key:
            raise MissingInput(f"{job.filename}: the original is not in the asset store")
        async with AsyncExitStack() as stack:
            try:
                path = await stack.enter_async_context(
                    self.services.assets.local_file(doc.asset_key)
                )
            except MissingInput as exc:
                raise MissingInput(f"{job.filename}: the original is gone: {exc}") from exc
            # One document at a time in this process: its parser process reads one.
            # The other slots still fetch their originals meanwhile; more parsing takes
            # more processes (``--stages parse``).
            if self._cpu is None:
                self._cpu = anyio.CapacityLimiter(1)
            request = self._request(path, doc.filename, doc.media_type)
            out = await anyio.to_thread.run_sync(self._parse, job, request, limiter=self._cpu)
        ctx.note(pages=len(out.pages), images=len(out.assets), bytes=doc.byte_size)
        return out

    def _request(self, path: Path, filename: str, media_type: str) -> ParseRequest:
        return parse_request(path, filename, media_type, self.services.settings)

    def _parse(self, job: Job, request: ParseRequest) -> ParseOutput:
        """Runs in a worker thread; stores images through the event loop as they come."""
        pages: list[checkpoints.Page] = []
        assets: list[checkpoints.Asset] = []

        def take(unit: Unit) -> None:
            pages.append(checkpoints.Page(unit.page, unit.text, unit.section, unit.layout))
            assets.extend(self._store(job, image) for image in unit.images)

        self.services.parser.parse(request, take)
        return ParseOutput(pages=pages, assets=assets)

    def _store(self, job: Job, image: Image) -> checkpoints.Asset:
        key = image_key(job.document_id, image.sha256, image.ext)
        anyio.from_thread.run(self.services.assets.put, key, image.data, image.media_type)
        return checkpoints.Asset(
            sha256=image.sha256,
            object_key=key,
            media_type=image.media_type,
            byte_size=len(image.data),
            page=image.page,
            width=image.width,
            height=image.height,
        )

    async def write(self, conn: DbConn, job: Job, output: ParseOutput) -> None:
        await checkpoints.replace_pages(conn, job.document_id, output.pages)
        await checkpoints.replace_assets(conn, job.document_id, output.assets)

    async def on_failed(self, job: Job) -> None:
        """Nothing to undo: images are content-addressed and go with the document."""
