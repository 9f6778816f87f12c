"""A PDF's structure at the search doors (issue 35): made PDFs ingested by the CLI (the
fake Cohere embeds), then ``search --json`` and ``GET /v1/search`` each give a hit its
section (the outline's heading path), its boxes on its pages, and mark a table's pieces;
the stored page keeps the running header the chunks leave out."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from bench.harness.cli import Cli
from bench.harness.db import Databases, sql
from bench.harness.made_pdfs import HEADER, outline_pdf, tables_pdf
from bench.harness.serve import Server, running_server
from tests.support.browser import chromium, needs_chromium
from tests.support.pipeline_env import FAKE_DIMS, TimedCohere, cohere_env

TOKEN = "tok-open"
ARTIFACTS = Path(__file__).resolve().parents[2] / "tests" / "artifacts"


class Ingested:
    def __init__(self, cli: Cli, server: Server, dsn: str) -> None:
        self.cli, self.server, self.dsn = cli, server, dsn


@pytest.fixture(scope="module")
def ingested(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ingested]:
    tmp = tmp_path_factory.mktemp("structure")
    folder = tmp / "in"
    folder.mkdir()
    outline_pdf(folder / "almanac.pdf")
    tables_pdf(folder / "settings.pdf")
    with TimedCohere(dims=FAKE_DIMS) as fake, databases.fresh() as dsn:
        cli = Cli(dsn, tmp / "data", tmp / "logs", **cohere_env(fake))
        with running_server(cli, RAGLINE_API_TOKENS=TOKEN) as server:
            done = cli.run("ingest", str(folder), "--json")
            assert done.code == 0, done
            yield Ingested(cli, server, dsn)


def cli_hits(ingested: Ingested, query: str) -> list[dict[str, Any]]:
    done = ingested.cli.run("search", query, "--json", "-k", "50", "--mode", "keyword")
    assert done.code == 0, done
    hits: list[dict[str, Any]] = json.loads(done.out)
    return hits


def api_hits(ingested: Ingested, query: str) -> list[dict[str, Any]]:
    with ingested.server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        r = http.get("/v1/search", params={"q": query, "k": 50, "mode": "keyword"})
    assert r.status_code == 200, r.text
    hits: list[dict[str, Any]] = r.json()
    return hits


@pytest.mark.parametrize("door", [cli_hits, api_hits])
def test_a_hit_says_its_section_and_where_it_sits(ingested: Ingested, door: Any) -> None:
    [hit] = [h for h in door(ingested, "springrange") if "springrange" in h["text"]]
    # Its section first; sections shorter than a quarter of a chunk (these are a
    # sentence or two) share a chunk with the next, which the label names after it.
    assert hit["section"].startswith("1 Tides › 1.1 Spring tides")
    assert hit["boxes"], hit
    for box in hit["boxes"]:
        assert hit["page_start"] <= box["page"] <= hit["page_end"]
        assert 0 <= box["x0"] < box["x1"] <= 595 and 0 <= box["y0"] < box["y1"] <= 842
    assert HEADER not in hit["text"]
    assert not hit.get("table", False)


@pytest.mark.parametrize("door", [cli_hits, api_hits])
def test_a_table_piece_is_marked_and_starts_with_its_header(ingested: Ingested, door: Any) -> None:
    hits = [h for h in door(ingested, "timeout") if "timeout" in h["text"]]
    [hit] = hits
    assert hit["table"] is True
    assert hit["text"].startswith("| Setting | Default | Meaning |\n| --- | --- | --- |")
    assert "| timeout | 30 | seconds before a request fails |" in hit["text"]


@pytest.mark.parametrize("door", [cli_hits, api_hits])
def test_booktabs_and_continued_tables_come_back_as_tables(ingested: Ingested, door: Any) -> None:
    """Page 6's table has horizontal rules only; page 8 goes on with page 7's table
    without its header row: both come back as table pieces under their own header."""
    [booktabs] = [h for h in door(ingested, "tabsize") if "tabsize" in h["text"]]
    assert booktabs["table"] is True and booktabs["page_start"] == 6
    assert booktabs["text"].startswith("| Option | Type | Default | Effect |\n| --- |")
    assert "| tabsize | integer | 8 | columns a tab character advances |" in booktabs["text"]
    [continued] = [h for h in door(ingested, "mirror20") if "| mirror20 |" in h["text"]]
    assert continued["table"] is True and continued["page_end"] == 8
    assert continued["text"].startswith("| Mirror | Region | Host |\n| --- | --- | --- |\n")
    assert "| mirror20 | region6 | host20.example.org |" in continued["text"]


def test_the_stored_page_keeps_the_running_header(ingested: Ingested) -> None:
    rows = sql(ingested.dsn, "SELECT text FROM pages ORDER BY page")
    assert rows and all(HEADER in r[0] for r in rows if "Tides" in r[0] or "Currents" in r[0])


def test_the_section_filter_finds_a_pdf_section(ingested: Ingested) -> None:
    done = ingested.cli.run(
        "search",
        "ebbflow neaprange",
        "--json",
        "-k",
        "50",
        "--mode",
        "keyword",
        "--section",
        "1 tides",
    )
    assert done.code == 0, done
    hits = json.loads(done.out)
    assert hits and all(h["section"].startswith("1 Tides") for h in hits)
    assert any("neaprange" in h["text"] for h in hits)
    assert not any("ebbflow" in h["text"] for h in hits)  # section 2's


def test_the_web_view_shows_a_hit_on_its_page_highlighted(ingested: Ingested) -> None:
    """The search page links a PDF hit to its page rendered with the hit's boxes filled
    yellow; the picture is rendered once and kept (the second answer is the same)."""
    [hit] = [h for h in api_hits(ingested, "springrange") if "springrange" in h["text"]]
    with ingested.server.client(cookies={"ragline_token": TOKEN}) as web:
        page = web.get("/search", params={"q": "springrange", "k": 5})
        assert page.status_code == 200, page.text
        link = re.search(r'<a class="where" href="([^"]+)"', page.text)
        assert link is not None, page.text
        shown = web.get(link.group(1).replace("&amp;", "&"))
        assert shown.status_code == 200, shown.text
        assert shown.headers["content-type"] == "image/png"
        assert web.get(link.group(1).replace("&amp;", "&")).content == shown.content
        missing = web.get(f"/documents/{hit['document_id']}/pages/1?chunk=9999")
        assert missing.status_code == 404
    picture = Image.open(io.BytesIO(shown.content)).convert("RGB")
    scale = picture.width / 595
    box = hit["boxes"][0]
    # Just above the box's first line (the highlight reaches 2 pt past the box), and in
    # the left margin at that height.
    y = int((box["y0"] - 1) * scale)
    inside = picture.getpixel((int((box["x0"] + box["x1"]) / 2 * scale), y))
    outside = picture.getpixel((int(10 * scale), y))
    assert outside == (255, 255, 255)
    assert isinstance(inside, tuple)
    red, green, blue = inside[:3]
    assert blue < 220 and red > 200 and green > 180, inside  # yellow over white


@needs_chromium
def test_a_browser_opens_the_highlighted_page(ingested: Ingested) -> None:
    """Headless Chromium: log in, search, follow the hit's "see it on the page" link, and
    see the page picture; its screenshot goes to tests/artifacts/ (docs/formats.md)."""
    from selenium.webdriver.common.by import By

    for driver in chromium():
        driver.get(f"{ingested.server.url}/login")
        driver.add_cookie({"name": "ragline_token", "value": TOKEN})  # as the form sets it
        driver.get(f"{ingested.server.url}/search?q=springrange&k=5")
        link = driver.find_element(By.CSS_SELECTOR, "a.where")
        link.click()
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(driver, 30).until(
            lambda d: (
                int(d.find_element(By.TAG_NAME, "img").get_attribute("naturalWidth") or 0) > 500
            )
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "structure-highlighted-page.png"))
