"""The five stages, in order, over the services of one process (each stage in its own
module here; they never import each other)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.api import Pipeline

if TYPE_CHECKING:
    from stages.ports.services import Services

STAGES = ("parse", "chunk", "vision", "embed", "index")

#: Jobs in flight per stage in one process. parse is CPU-bound (scale it with processes);
#: embed and vision wait on the network or on a model running in a thread.
DEFAULT_CONCURRENCY = {"parse": 2, "chunk": 2, "vision": 2, "embed": 4, "index": 2}


def pipeline_for(services: Services) -> Pipeline:
    from stages.pipeline.chunk import ChunkStage
    from stages.pipeline.embed import EmbedStage
    from stages.pipeline.index import IndexStage
    from stages.pipeline.parse import ParseStage
    from stages.pipeline.vision import VisionStage

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
