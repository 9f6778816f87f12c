"""Test pipelines: the five stage names of the real pipeline, with scripted behaviour.

Each stage's output is written to ``test_effects`` inside the completion transaction, so a
test can count how many times a stage's effect was committed per document. Behaviour comes
from the constructor (in-process tests) or from ``RAGLINE_TEST_*`` variables (subprocess
workers started with ``--pipeline bench.harness.pipelines:plugin``):

- ``RAGLINE_TEST_SLEEP="chunk=30,embed=0.5"``: seconds a stage's process() takes;
- ``RAGLINE_TEST_FAIL="chunk=permanent"`` (or ``transient``, ``ratelimit:2``): raise;
- ``RAGLINE_TEST_FAIL_CALLS="chunk=1"``: only the first this many calls in the process fail;
- ``RAGLINE_TEST_NOOP=1``: stages return None (no writer, for benchmarks).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio

from runtime.errors import PermanentError, RateLimited, TransientError
from runtime.models import Job
from runtime.plugin import BuildContext, Plugin
from runtime.providers.specs import ProviderSpec
from runtime.stage import DbConn, JobContext, Pipeline

STAGES = ("parse", "chunk", "vision", "embed", "index")

EFFECTS_DDL = """
CREATE TABLE IF NOT EXISTS test_effects (
    id          bigserial PRIMARY KEY,
    document_id uuid NOT NULL,
    stage       text NOT NULL,
    job_id      bigint NOT NULL,
    pid         integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
)
"""


@dataclasses.dataclass(eq=False)
class ScriptedStage:
    name: str
    _: dataclasses.KW_ONLY
    sleep_s: float = 0.0
    fail: str | None = None
    #: Fail only the first this many calls (None: every call).
    fail_calls: int | None = None
    #: Checkpoint (an empty step) before failing: the attempt made progress.
    progress: bool = False
    noop: bool = False
    calls: int = dataclasses.field(default=0, init=False)
    failed_jobs: list[int] = dataclasses.field(default_factory=list, init=False)

    async def process(self, ctx: JobContext) -> Any:
        self.calls += 1
        if self.sleep_s:
            await anyio.sleep(self.sleep_s)
        if self.fail and (self.fail_calls is None or self.calls <= self.fail_calls):
            if self.progress:
                await ctx.checkpoint(_no_step)
            raise_scripted(self.fail, ctx.job)
        return None if self.noop else os.getpid()

    async def write(self, conn: DbConn, job: Job, output: Any) -> None:
        await conn.execute(
            "INSERT INTO test_effects (document_id, stage, job_id, pid) VALUES ($1, $2, $3, $4)",
            job.document_id,
            job.stage,
            job.id,
            int(output),
        )

    async def on_failed(self, job: Job) -> None:
        self.failed_jobs.append(job.id)


async def _no_step(conn: DbConn) -> None:
    """A checkpoint that writes nothing."""


def raise_scripted(kind: str, job: Job) -> None:
    what, _, arg = kind.partition(":")
    if what == "permanent":
        raise PermanentError(f"scripted permanent failure of {job.stage}")
    if what == "ratelimit":
        raise RateLimited("scripted 429", retry_after_s=float(arg or 1))
    if what == "transient":
        retry_after = float(arg) if arg else None
        raise TransientError("scripted transient failure", retry_after_s=retry_after)
    if what == "crash":
        raise ValueError("scripted bug")


def parse_map(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if "=" in p)


def build(ctx: BuildContext) -> Pipeline:
    return pipeline_from_env(ctx.env)


def pipeline_from_env(env: Mapping[str, str]) -> Pipeline:
    sleeps = parse_map(env.get("RAGLINE_TEST_SLEEP", ""))
    fails = parse_map(env.get("RAGLINE_TEST_FAIL", ""))
    calls = {s: int(n) for s, n in parse_map(env.get("RAGLINE_TEST_FAIL_CALLS", "")).items()}
    noop = env.get("RAGLINE_TEST_NOOP") == "1"
    return Pipeline(
        stages=[
            ScriptedStage(
                s,
                sleep_s=float(sleeps.get(s, 0)),
                fail=fails.get(s),
                fail_calls=calls.get(s),
                noop=noop,
            )
            for s in STAGES
        ]
    )


plugin = Plugin(stage_names=STAGES, build=build)


# -- a pipeline whose embed stage calls a Cohere-compatible provider -------------------


class ProviderCallStage(ScriptedStage):
    """``embed`` making one call per job to a Cohere-compatible server through the
    engine's provider gate (``ctx.calling``), as the real embed stage does; declares the
    provider with ``RAGLINE_EMBED_RPM`` as its fleet-wide budget. Built from
    ``COHERE_BASE_URL``; for worker processes sharing one budget."""

    def __init__(self, env: Mapping[str, str]) -> None:
        from stages.adapters.embedder.cohere import CohereEmbedder, CohereEmbedderConfig

        super().__init__("embed", noop=True)
        self.embedder = CohereEmbedder(
            CohereEmbedderConfig(
                api_key="test-key", base_url=env["COHERE_BASE_URL"], dimensions=8, timeout_s=10
            )
        )
        rpm = float(env.get("RAGLINE_EMBED_RPM") or 0)
        self.providers = (ProviderSpec(name="cohere/embed-v4.0", requests_per_min=rpm),)

    async def process(self, ctx: JobContext) -> Any:
        self.calls += 1
        async with ctx.calling(self.providers[0].name, tokens=1):
            await self.embedder.embed([str(ctx.job.document_id)], "search_document")
        return None


def build_provider_pipeline(ctx: BuildContext) -> Pipeline:
    embed = ProviderCallStage(ctx.env)

    @contextlib.asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        try:
            yield
        finally:
            await embed.embedder.aclose()

    stages = [embed if s == "embed" else ScriptedStage(s, noop=True) for s in STAGES]
    return Pipeline(stages=stages, lifespan=lifespan)


provider_plugin = Plugin(stage_names=STAGES, build=build_provider_pipeline)
