"""The web view in headless Chromium (Debian's ``chromium`` + ``chromium-driver`` through
Selenium): upload through the page, watch it reach ready without a reload, open its page,
retry a failed document, search. Screenshots go to ``tests/artifacts/``.

``ragline serve`` and a worker (``python -m runtime``) run as subprocesses on one database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from bench.harness.cli import Cli, Running
from bench.harness.db import Databases
from bench.harness.serve import Server, running_server
from tests.support.browser import needs_chromium
from tests.support.pdfs import write_truncated_pdf

pytestmark = needs_chromium

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "tests" / "artifacts"
SAMPLE = REPO / "samples" / "sourdough.pdf"
#: Seconds the page may take to show a document ready (parse → index on a busy machine).
READY_TIMEOUT_S = 90
T = TypeVar("T")


@pytest.fixture(scope="module")
def stack(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    name = databases.clone()
    tmp = tmp_path_factory.mktemp("browser")
    cli = Cli(databases.dsn(name), tmp / "data", tmp / "logs")
    worker: Running | None = None
    try:
        with running_server(cli, "--sse-heartbeat", "1") as server:
            worker = cli.start("--poll", "0.5")
            yield server
    finally:
        if worker is not None:
            worker.kill()
        databases.drop(name)


def shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"serve-{name}.png"))


def wait_for(driver: Any, check: Callable[[Any], T], what: str, timeout_s: float = 30) -> T:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        result: T = WebDriverWait(driver, timeout_s, poll_frequency=0.1).until(check)
    except TimeoutException:
        shot(driver, "timeout")
        raise AssertionError(f"timed out waiting for {what}") from None
    return result


def row_status(driver: Any, filename: str) -> str | None:
    from selenium.webdriver.common.by import By

    for row in driver.find_elements(By.CSS_SELECTOR, "#documents tbody tr"):
        if row.find_element(By.CSS_SELECTOR, "td a").text == filename:
            return str(row.find_element(By.CSS_SELECTOR, "td.status").text)
    return None


def open_list_and_upload(driver: Any, server: Server, path: Path) -> None:
    from selenium.webdriver.common.by import By

    driver.get(server.url + "/")
    wait_for(
        driver,
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "open",
        "the event stream",
    )
    driver.execute_script("window.noReloadMarker = 42")
    driver.find_element(By.ID, "upload-file").send_keys(str(path))
    driver.find_element(By.ID, "upload-button").click()


def test_upload_goes_live_to_ready_then_its_page(driver: Any, stack: Server) -> None:
    from selenium.webdriver.common.by import By

    open_list_and_upload(driver, stack, SAMPLE)
    wait_for(driver, lambda d: row_status(d, SAMPLE.name) is not None, "the uploaded row")
    shot(driver, "list-uploaded")
    wait_for(driver, lambda d: row_status(d, SAMPLE.name) == "ready", "ready", READY_TIMEOUT_S)
    # The same page all along: what the script set before the upload is still there.
    assert driver.execute_script("return window.noReloadMarker") == 42
    seen = driver.execute_script("return window.raglineEvents.map(e => e.status)")
    assert "processing" in seen and seen[-1] == "ready"
    shot(driver, "list-ready")

    driver.find_element(By.LINK_TEXT, SAMPLE.name).click()
    wait_for(driver, lambda d: d.find_element(By.ID, "doc-status").text == "ready", "its page")
    assert int(driver.find_element(By.ID, "count-chunks").text) > 0
    assert (
        driver.find_element(By.ID, "count-points").text
        == driver.find_element(By.ID, "count-chunks").text
    )
    stages = [
        td.text for td in driver.find_elements(By.CSS_SELECTOR, "#jobs tbody tr td:first-child")
    ]
    assert stages == ["parse", "chunk", "vision", "embed", "index"]
    shot(driver, "document-ready")


def failed_again(driver: Any) -> list[str] | None:
    """The statuses the page received, once they show a retry (pending) ending failed."""
    seen: list[str] = driver.execute_script("return window.raglineEvents.map(e => e.status)")
    return seen if "pending" in seen and seen[-1] == "failed" else None


def test_retry_a_failed_document_from_its_page(driver: Any, stack: Server, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    broken = write_truncated_pdf(tmp_path / "broken-in-browser.pdf")
    open_list_and_upload(driver, stack, broken)
    wait_for(driver, lambda d: row_status(d, broken.name) == "failed", "failed", READY_TIMEOUT_S)
    shot(driver, "list-failed")
    driver.find_element(By.LINK_TEXT, broken.name).click()
    wait_for(driver, lambda d: d.find_element(By.ID, "doc-status").text == "failed", "its page")
    assert "broken-in-browser.pdf" in driver.find_element(By.ID, "doc-error").text
    wait_for(
        driver,
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "open",
        "the event stream",
    )
    driver.find_element(By.ID, "retry").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "message").text == "requeued", "requeued")
    # Live on the page: back to pending, then failed again (the bytes are still broken).
    statuses = wait_for(driver, failed_again, "the retried run to fail again", READY_TIMEOUT_S)
    assert statuses is not None and statuses[0] == "pending"
    assert driver.find_element(By.ID, "doc-status").text == "failed"
    shot(driver, "document-retried")


def test_search_box_links_to_the_document(driver: Any, stack: Server) -> None:
    from selenium.webdriver.common.by import By

    driver.get(stack.url + "/search")
    box = driver.find_element(By.ID, "q")
    box.send_keys("sourdough starter")
    box.submit()
    hits = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#hits li a"), "hits")
    assert hits[0].text == SAMPLE.name
    shot(driver, "search")
    hits[0].click()
    wait_for(
        driver, lambda d: d.find_element(By.ID, "filename").text == SAMPLE.name, "the hit's page"
    )


def test_stage_overview_page(driver: Any, stack: Server) -> None:
    from selenium.webdriver.common.by import By

    driver.get(stack.url + "/stages")
    rows = driver.find_elements(By.CSS_SELECTOR, "#stages tbody tr")
    assert [r.find_element(By.TAG_NAME, "td").text for r in rows] == [
        "parse",
        "chunk",
        "vision",
        "embed",
        "index",
    ]
    # The worker subprocess is live and serves every stage.
    assert all(r.find_elements(By.TAG_NAME, "td")[6].text == "1" for r in rows)
    shot(driver, "stages")
