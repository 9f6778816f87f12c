"""Security trimming in search: a caller sees documents without readers and those whose
readers include one of its principals, never another; readers change with no embed call
and no index write; a readable document ranked past the first round's depth is still
found (the index asked deeper), with and without other filters."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from runtime.api import ConfigurationError, MissingInput
from stages.actions.metadata import check_principals, set_readers
from stages.actions.search import SPARE, filters_of, search
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import TimedCohere, sample

pytestmark = pytest.mark.anyio

SAMPLES = ("sourdough.pdf", "lighthouses.pdf", "rust-borrow-checker.pdf", "tides.md")


async def test_callers_see_only_what_they_may_read(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        ids = dict(zip(SAMPLES, await env.submit_all(sample(n) for n in SAMPLES), strict=True))
        await env.run()
        svc, pool = env.probe, env.pool
        embeds = fake_cohere.stats.requests.get("embed", 0)
        points = await svc.index.count(svc.vector_collection)
        await set_readers(pool, [ids["sourdough.pdf"]], ["bakers"])
        await set_readers(pool, [ids["lighthouses.pdf"]], ["keepers", "admins"])
        await set_readers(pool, [ids["tides.md"]], [])  # only tokens without principals

        async def seen(principals: list[str] | None, **given: object) -> set[str]:
            found = await search(
                pool, svc, "the", 50, mode="keyword", principals=principals,
                filters=filters_of(**given),  # type: ignore[arg-type]
            )  # fmt: skip
            return {h.filename for h in found.hits}

        assert await seen(None) == set(SAMPLES)
        assert await seen(["bakers"]) == {"sourdough.pdf", "rust-borrow-checker.pdf"}
        assert await seen(["keepers", "x"]) == {"lighthouses.pdf", "rust-borrow-checker.pdf"}
        assert await seen([]) == {"rust-borrow-checker.pdf"}
        assert await seen(["bakers"], media_types=["application/pdf"]) == {
            "sourdough.pdf", "rust-borrow-checker.pdf"
        }  # fmt: skip
        assert await seen(["nobody"], documents=[str(ids["sourdough.pdf"])]) == set()
        # Back to everyone.
        await set_readers(pool, [ids["sourdough.pdf"]], None)
        assert "sourdough.pdf" in await seen(["nobody"])
        assert fake_cohere.stats.requests.get("embed", 0) == embeds
        assert await svc.index.count(svc.vector_collection) == points

        with pytest.raises(MissingInput, match="no such document"):
            await set_readers(pool, [uuid.UUID(int=5)], ["a"])
        with pytest.raises(ConfigurationError, match="not a principal name"):
            check_principals(["a,b"])


async def test_a_readable_document_ranked_deep_is_found(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere, tmp_path: Path
) -> None:
    """Thirty files match the query; the caller may read only the one ranked last."""
    files = [tmp_path / f"f{n:02d}.md" for n in range(30)]
    for n, path in enumerate(files):
        path.write_text(f"# File {n}\n\n" + f"lantern {'lantern ' * (30 - n)} words {n}. " * 10)
    async with cohere_pipeline(fake_cohere) as env:
        ids = await env.submit_all(files)
        await env.run()
        svc, pool = env.probe, env.pool
        ranked = (await search(pool, svc, "lantern", 100, mode="keyword")).hits
        last = ranked[-1].document_id
        assert all(h.document_id != last for h in ranked[: 2 + SPARE])
        await set_readers(pool, [d for d in ids if d != last], ["others"])
        [hit] = (await search(pool, svc, "lantern", 1, mode="keyword", principals=["me"])).hits
        assert hit.document_id == last
