"""Search filters are answered by PostgreSQL: documents, type, path, dates, source and
metadata narrow the index's search to the documents they allow; pages and sections
narrow the hits, the index asked deeper while too few pass. Changing metadata costs no
embed call and no index write. Over the real pipeline, the embedded index and a local
Cohere-compatible embedder."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runtime.api import ConfigurationError, MissingInput
from stages.actions.metadata import set_metadata
from stages.actions.search import SPARE, filters_of, search
from tests.integration.conftest import OpenPipeline
from tests.support.pipeline_env import TimedCohere, sample

pytestmark = pytest.mark.anyio

SAMPLES = ("sourdough.pdf", "lighthouses.pdf", "rust-borrow-checker.pdf", "tides.md")


async def test_document_filters(cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        ids = dict(zip(SAMPLES, await env.submit_all(sample(n) for n in SAMPLES), strict=True))
        await env.run()
        svc, pool = env.probe, env.pool

        async def found(**given: object) -> set[str]:
            hits = await search(pool, svc, "the", 50, mode="keyword", filters=filters_of(**given))  # type: ignore[arg-type]
            return {h.filename for h in hits.hits}

        assert await found() == set(SAMPLES)
        assert await found(media_types=["text/markdown"]) == {"tides.md"}
        assert await found(documents=[str(ids["lighthouses.pdf"])]) == {"lighthouses.pdf"}
        assert await found(path_prefix="rust-") == {"rust-borrow-checker.pdf"}

        # Dates: the file's modification time where sync saw one, else when submitted.
        await pool.execute(
            "UPDATE documents SET created_at = '2001-02-03T00:00:00Z' WHERE id = $1",
            ids["sourdough.pdf"],
        )
        assert await found(until="2002-01-01") == {"sourdough.pdf"}
        assert "sourdough.pdf" not in await found(since="2002-01-01")
        mtime = int(datetime(1999, 1, 1, tzinfo=UTC).timestamp() * 1e9)
        await pool.execute(
            "UPDATE documents SET source_mtime_ns = $2 WHERE id = $1", ids["tides.md"], mtime
        )
        assert await found(until="2000-01-01") == {"tides.md"}

        # A source: the documents a sync source owns.
        source = await pool.fetchval(
            "INSERT INTO sources (uri) VALUES ('/srv/manuals') RETURNING id"
        )
        await pool.execute(
            "UPDATE documents SET source_id = $2, source_uri = 'guides/lights.pdf' WHERE id = $1",
            ids["lighthouses.pdf"], source,
        )  # fmt: skip
        assert await found(source="/srv/manuals") == {"lighthouses.pdf"}
        assert await found(path_prefix="guides/") == {"lighthouses.pdf"}
        assert await found(source="/srv/other") == set()


async def test_metadata_changes_cost_no_embed_call_and_filter_at_once(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        ids = dict(zip(SAMPLES, await env.submit_all(sample(n) for n in SAMPLES), strict=True))
        await env.run()
        svc, pool = env.probe, env.pool
        embeds = fake_cohere.stats.requests.get("embed", 0)
        points = await svc.index.count(svc.vector_collection)

        await set_metadata(pool, [ids["tides.md"], ids["sourdough.pdf"]], {"team": "ocean"})
        await set_metadata(pool, [ids["sourdough.pdf"]], {"team": "bakery", "year": 2024})
        team = filters_of(metadata=["team=ocean"])
        hits = await search(pool, svc, "the", 50, mode="keyword", filters=team)
        assert {h.filename for h in hits.hits} == {"tides.md"}
        assert all(h.metadata == {"team": "ocean"} for h in hits.hits)
        # A key given twice wants both values: no document holds two (not the last one).
        both = filters_of(metadata=["team=bakery", "team=ocean"])
        assert (await search(pool, svc, "the", 50, mode="keyword", filters=both)).hits == []
        again = filters_of(metadata=["team=ocean", "team=ocean"])
        hits = await search(pool, svc, "the", 50, mode="keyword", filters=again)
        assert {h.filename for h in hits.hits} == {"tides.md"}
        # Removing a key (None) and replacing whole.
        await set_metadata(pool, [ids["tides.md"]], {"team": None})
        assert (await search(pool, svc, "the", 50, mode="keyword", filters=team)).hits == []
        await set_metadata(pool, [ids["sourdough.pdf"]], {"kind": "recipe"}, replace=True)
        row = await pool.fetchval(
            "SELECT metadata FROM documents WHERE id = $1", ids["sourdough.pdf"]
        )
        assert row == '{"kind": "recipe"}'

        assert fake_cohere.stats.requests.get("embed", 0) == embeds  # nothing re-embedded
        assert await svc.index.count(svc.vector_collection) == points

        # An unknown document changes nothing, in one line; so does a bad value.
        with pytest.raises(MissingInput, match="no such document"):
            await set_metadata(pool, [ids["tides.md"], uuid.UUID(int=1)], {"a": "b"})
        assert (
            await pool.fetchval("SELECT metadata FROM documents WHERE id = $1", ids["tides.md"])
            == "{}"
        )
        with pytest.raises(ConfigurationError, match="a value must be"):
            await set_metadata(pool, [ids["tides.md"]], {"a": {"nested": 1}})
        # Another collection's document is not found through a collection.
        with pytest.raises(MissingInput, match="in collection 'other'"):
            await set_metadata(pool, [ids["tides.md"]], {"a": "b"}, collection="other")


async def test_chunk_filters_go_deeper_until_enough_hits_pass(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere
) -> None:
    async with cohere_pipeline(fake_cohere) as env:
        await env.submit_all(sample(n) for n in SAMPLES)
        await env.run()
        svc, pool = env.probe, env.pool
        pages = await pool.fetch(
            "SELECT DISTINCT page_start, page_end FROM chunks WHERE page_start >= 2"
        )
        assert pages, "the samples have chunks past page 1"
        late = filters_of(pages="2-")
        hits = await search(pool, svc, "the", 3, mode="keyword", filters=late)
        assert hits.hits and all(h.page_end >= 2 for h in hits.hits)
        one = filters_of(pages="1")
        assert all(
            h.page_start <= 1 for h in (await search(pool, svc, "the", 20, filters=one)).hits
        )

        sections = await pool.fetch("SELECT DISTINCT section FROM chunks WHERE section IS NOT NULL")
        label = sorted(r["section"] for r in sections)[-1]
        prefix = label[: max(3, len(label) // 2)].upper()  # case does not matter
        within = await search(
            pool, svc, "the", 5, mode="keyword", filters=filters_of(section=prefix)
        )
        assert within.hits and all(
            (h.section or "").lower().startswith(prefix.lower()) for h in within.hits
        )


async def test_a_section_ranked_deep_is_found_by_asking_deeper(
    cohere_pipeline: OpenPipeline, fake_cohere: TimedCohere, tmp_path: Path
) -> None:
    """Sixty sections that all match; the filter allows only the one ranked last, past
    the first round's depth (2 × limit + SPARE)."""
    parts = [f"## Part {n:02d}\n\n" + f"lantern {'lantern ' * (60 - n)}words {n}. " * 20
             for n in range(60)]  # fmt: skip
    (tmp_path / "parts.md").write_text("# Parts\n\n" + "\n\n".join(parts))
    async with cohere_pipeline(fake_cohere) as env:
        await env.submit_all([tmp_path / "parts.md"])
        await env.run()
        svc, pool = env.probe, env.pool
        ranked = (await search(pool, svc, "lantern", 100, mode="keyword")).hits
        assert len(ranked) > 2 + SPARE
        last = ranked[-1].section or ""
        assert last and all(h.section != last for h in ranked[: 2 + SPARE])
        [hit] = (
            await search(pool, svc, "lantern", 1, mode="keyword", filters=filters_of(section=last))
        ).hits
        assert hit.section == last


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"pages": "9-3"}, "pages: expected"),
        ({"pages": "zero"}, "pages: expected"),
        ({"pages": "0"}, "pages: expected"),
        ({"since": "yesterday"}, "since: not a date"),
        ({"until": "0001-01-01T00:00:00+05:00"}, "until: out of the range of dates"),
        ({"metadata": ["novalue"]}, "metadata: expected KEY=VALUE"),
        ({"documents": ["nope"]}, "document: not a document id"),
    ],
)
def test_bad_filters_are_one_line(given: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        filters_of(**given)  # type: ignore[arg-type]


def test_filter_words_parse() -> None:
    f = filters_of(pages="3-9", since="2024-05-01", metadata=["a=b=c", "team = docs"])
    assert f.pages == (3, 9) and f.since == datetime(2024, 5, 1, tzinfo=UTC)
    assert f.metadata == {"a": "b=c", "team": " docs"}
    assert filters_of(pages="7").pages == (7, 7) and filters_of(pages="-4").pages == (None, 4)
    assert filters_of().of_documents(None) is None and not filters_of().of_chunks
