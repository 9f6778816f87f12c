"""The pipeline: five stages over shared services."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.api import BuildContext, Pipeline

if TYPE_CHECKING:
    from stages.services import Services

STAGES = ("parse", "chunk", "vision", "embed", "index")

#: Jobs in flight per stage in one process. parse is CPU-bound (scale it with processes);
#: embed and vision wait on the network or on a model running in a thread.
DEFAULT_CONCURRENCY = {"parse": 2, "chunk": 2, "vision": 2, "embed": 4, "index": 2}


def services_for(ctx: BuildContext) -> Services:
    # Imported here: the services bring PyMuPDF, onnxruntime, qdrant-client and minio.
    from stages.services import Services

    return Services(ctx.env, ctx.data_dir)


def pipeline_for(services: Services) -> Pipeline:
    from stages.chunk import ChunkStage
    from stages.embed import EmbedStage
    from stages.index import IndexStage
    from stages.parse import ParseStage
    from stages.vision import VisionStage

    return Pipeline(
        stages=[
            ParseStage(services),
            ChunkStage(services),
            VisionStage(services),
            EmbedStage(services),
            IndexStage(services),
        ],
        lifespan=services.lifespan,
        prepare_for=services.prepare,
    )


def build(ctx: BuildContext) -> Pipeline:
    return pipeline_for(services_for(ctx))
