"""The HTTP API over real HTTP: ``ragline serve`` in a subprocess, httpx (and raw sockets
for what httpx will not send), workers as ``python -m runtime --exit-when-idle``."""

from __future__ import annotations

import base64
import json
import signal
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness.cli import Cli
from bench.harness.db import Databases, sql
from bench.harness.serve import Server, running_server
from tests.support.pdfs import write_truncated_pdf

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def cli(databases: Databases, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cli]:
    tmp = tmp_path_factory.mktemp("serve")
    with databases.fresh() as dsn:
        yield Cli(dsn, tmp / "data", tmp / "logs")


@pytest.fixture(scope="module")
def server(cli: Cli) -> Iterator[Server]:
    with running_server(cli, "--max-upload-mb", "5", "--sse-heartbeat", "0.5") as s:
        yield s


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def raw_upload(http: httpx.Client, path: Path, **headers: str) -> httpx.Response:
    hdrs = {"Content-Disposition": f'attachment; filename="{path.name}"', **headers}
    return http.post("/v1/documents", content=path.read_bytes(), headers=hdrs)


def is_problem(r: httpx.Response, status: int, detail_part: str) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith(PROBLEM), r.headers
    body = r.json()
    assert body["status"] == status and body["title"], body
    assert detail_part in body["detail"], body


def document_count(cli: Cli) -> int:
    return int(sql(cli.dsn, "SELECT count(*) FROM documents")[0][0])


def stored_files(cli: Cli) -> list[Path]:
    root = cli.data_dir / "assets"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def raw_request(
    server: Server,
    head: str,
    body: bytes = b"",
    close_early: bool = False,
    timeout_s: float = 30,
) -> str:
    """Send bytes on a socket; return what the server answered ('' if it only closed, or
    said nothing within ``timeout_s``)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        if close_early:
            return ""
        chunks = []
        try:
            while data := s.recv(65536):
                chunks.append(data)
        except (ConnectionResetError, TimeoutError):
            pass
        return b"".join(chunks).decode(errors="replace")


# -- uploads ---------------------------------------------------------------------------------


def test_upload_raw_then_same_bytes_and_idempotency_key(http: httpx.Client, cli: Cli) -> None:
    r = raw_upload(http, SAMPLES / "sourdough.pdf", **{"Idempotency-Key": "k-1"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["created"] is True and body["status_url"] == f"/v1/documents/{body['id']}"
    assert r.headers["location"] == body["status_url"]

    again = raw_upload(http, SAMPLES / "sourdough.pdf")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    # The same key with the same bytes and collection: the first upload's document.
    keyed = raw_upload(http, SAMPLES / "sourdough.pdf", **{"Idempotency-Key": "k-1"})
    assert keyed.status_code == 200 and keyed.json() == {**body, "created": False}

    # The bytes are in the asset store (moved in from the spool), under the document's id.
    [original] = (cli.data_dir / "assets" / "documents" / body["id"]).glob("original-*")
    assert original.read_bytes() == (SAMPLES / "sourdough.pdf").read_bytes()
    assert not list((cli.data_dir / "uploads").iterdir())
    doc = http.get(body["status_url"]).json()
    assert doc["filename"] == "sourdough.pdf" and doc["status"] == "pending"
    assert doc["stage"] == "parse" and [j["stage"] for j in doc["jobs"]] == ["parse"]


def test_reused_idempotency_key_with_another_request_is_422(http: httpx.Client, cli: Cli) -> None:
    """The IETF idempotency-key draft: a key reused with another payload is 422, and the
    new bytes are not stored under the first document."""
    first = raw_upload(http, SAMPLES / "sourdough.pdf", **{"Idempotency-Key": "k-422"})
    assert first.status_code in (200, 202), first.text
    before, files = document_count(cli), stored_files(cli)
    other_bytes = raw_upload(http, SAMPLES / "lighthouses.pdf", **{"Idempotency-Key": "k-422"})
    is_problem(other_bytes, 422, "Idempotency-Key")
    other_collection = http.post(
        "/v1/documents",
        params={"collection": "elsewhere"},
        content=(SAMPLES / "sourdough.pdf").read_bytes(),
        headers={"Idempotency-Key": "k-422"},
    )
    is_problem(other_collection, 422, "Idempotency-Key")
    again = raw_upload(http, SAMPLES / "sourdough.pdf", **{"Idempotency-Key": "k-422"})
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert again.json()["created"] is False
    assert document_count(cli) == before and stored_files(cli) == files
    assert not list((cli.data_dir / "uploads").iterdir())


def test_two_file_parts_are_refused(http: httpx.Client, cli: Cli) -> None:
    before = document_count(cli)
    two = http.post(
        "/v1/documents",
        files=[
            ("file", ("a.md", b"# first file\n", "text/markdown")),
            ("file", ("b.md", b"# second file\n", "text/markdown")),
        ],
    )
    is_problem(two, 400, "more than one 'file'")
    assert document_count(cli) == before
    assert not list((cli.data_dir / "uploads").iterdir())


@pytest.mark.parametrize(
    ("query", "fields", "said"),
    [
        # The form's collection is checked even beside a good query parameter (it was
        # ignored then: schemathesis's ST201 "schema-violating request accepted").
        ({"collection": "good"}, [("collection", "5*")], "collection"),
        ({"collection": "good"}, [("collection", "other")], "disagree"),
        ({}, [("collection", "one"), ("collection", "two")], "more than one 'collection'"),
    ],
    ids=["bad-field", "disagreeing", "two-fields"],
)
def test_the_forms_collection_is_checked(
    http: httpx.Client,
    cli: Cli,
    query: dict[str, str],
    fields: list[tuple[str, str]],
    said: str,
) -> None:
    before = document_count(cli)
    refused = http.post(
        "/v1/documents",
        params=query,
        files=[
            *((name, (None, value.encode())) for name, value in fields),  # plain fields
            ("file", ("c.md", f"# {said}\n".encode(), "text/markdown")),
        ],
    )
    is_problem(refused, 400, said)
    assert document_count(cli) == before
    assert not list((cli.data_dir / "uploads").iterdir())


def test_bad_collection_is_refused_before_the_body(server: Server) -> None:
    """400 as soon as the head is read: the server does not wait for a body it would
    refuse (here one it never gets)."""
    head = (
        "POST /v1/documents?collection=Not%20Valid HTTP/1.1\nHost: 127.0.0.1\n"
        "Connection: close\nContent-Length: 4000000\nContent-Type: application/pdf\n"
    )
    answer = raw_request(server, head, b"%PDF-1.4\n", timeout_s=5)
    assert answer.startswith("HTTP/1.1 400"), answer[:300]
    assert "collection" in answer


def test_upload_multipart(http: httpx.Client) -> None:
    path = SAMPLES / "lighthouses.pdf"
    r = http.post(
        "/v1/documents", files={"file": (path.name, path.read_bytes(), "application/pdf")}
    )
    assert r.status_code == 202, r.text
    assert http.get(r.json()["status_url"]).json()["filename"] == "lighthouses.pdf"


def test_bad_uploads_answer_4xx_and_store_nothing(
    http: httpx.Client, server: Server, cli: Cli
) -> None:
    before, files = document_count(cli), stored_files(cli)
    is_problem(http.post("/v1/documents", content=b""), 400, "empty body")
    is_problem(
        http.post(
            "/v1/documents",
            content=b"\x00\x01 binary, no type ragline reads",
            headers={"Content-Disposition": 'attachment; filename="../../etc/notes.bin"'},
        ),
        415,
        "notes.bin: not a type ragline reads",
    )
    bad_multipart = http.post(
        "/v1/documents",
        content=b"--XX\r\nContent-Disposition: form-data; name=file\r\n\r\n%PDF-1.4 truncated",
        headers={"Content-Type": "multipart/form-data; boundary=XX"},
    )
    is_problem(bad_multipart, 400, "malformed multipart")
    no_file = http.post("/v1/documents", data={"other": "x"}, files={"f": ("a", b"b")})
    is_problem(no_file, 400, "no 'file' field")
    # A 2 GB upload is refused from its Content-Length, before any byte of it is read.
    answer = raw_request(
        server,
        "POST /v1/documents HTTP/1.1\nHost: 127.0.0.1\nConnection: close\n"
        "Content-Length: 2147483648\n"
        "Content-Type: application/pdf\n",
        b"%PDF-1.4\n",
    )
    assert answer.startswith("HTTP/1.1 413"), answer[:300]
    assert "larger than 5 MB" in answer
    # Without a Content-Length (chunked), the limit holds on the bytes themselves.
    big = http.post("/v1/documents", content=iter([b"%PDF-1.4\n", b"0" * (6 << 20)]))
    is_problem(big, 413, "larger than 5 MB")
    is_problem(
        raw_upload(http, SAMPLES / "sourdough.pdf", **{"Idempotency-Key": "bad key"}),
        400,
        "Idempotency-Key",
    )
    assert document_count(cli) == before and stored_files(cli) == files
    assert not list((cli.data_dir / "uploads").iterdir())


def test_client_disconnecting_mid_upload_leaves_nothing(server: Server, cli: Cli) -> None:
    before, files = document_count(cli), stored_files(cli)
    head = (
        "POST /v1/documents HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 4000000\n"
        'Content-Disposition: attachment; filename="half.pdf"\n'
    )
    raw_request(server, head, b"%PDF-1.4\n" + b"x" * 1_000_000, close_early=True)
    # The server is still fine and has dropped the half upload: no spool file, no row.
    with server.client() as http:
        assert http.get("/healthz").status_code == 200
        deadline = threading.Event()
        for _ in range(100):
            if not list((cli.data_dir / "uploads").iterdir()):
                break
            deadline.wait(0.1)
    assert not list((cli.data_dir / "uploads").iterdir())
    assert document_count(cli) == before and stored_files(cli) == files


# -- ids, listing, stages --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        # decoded into segments that match no route: a plain 404 problem
        ("/v1/documents/..%2F..%2Fetc%2Fpasswd", "Not Found"),
        ("/v1/documents/..%252F..%252Fetc", "ids are UUIDs"),
        ("/v1/documents/not-a-uuid", "ids are UUIDs"),
        (f"/v1/documents/{uuid.UUID(int=7)}", "no document"),
    ],
)
def test_unknown_or_malformed_ids_are_404(http: httpx.Client, path: str, detail: str) -> None:
    is_problem(http.get(path), 404, detail)
    is_problem(http.delete(path), 404, detail)
    is_problem(http.post(path + "/retry"), 404, detail)


def test_list_filters_and_cursor_pagination(http: httpx.Client) -> None:
    for name in ("rust-borrow-checker.pdf", "sourdough.pdf", "lighthouses.pdf"):
        assert raw_upload(http, SAMPLES / name).status_code in (200, 202)
    first = http.get("/v1/documents", params={"limit": 2}).json()
    assert len(first["documents"]) == 2 and first["next_cursor"]
    rest = http.get("/v1/documents", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    ids = [d["id"] for d in first["documents"] + rest["documents"]]
    assert len(ids) == len(set(ids)) == 3 and rest["next_cursor"] is None
    pending = http.get("/v1/documents", params={"status": "pending", "stage": "parse"}).json()
    assert {d["status"] for d in pending["documents"]} == {"pending"}
    assert http.get("/v1/documents", params={"status": "ready"}).json()["documents"] == []
    is_problem(http.get("/v1/documents", params={"status": "nope"}), 400, "status must be")
    is_problem(http.get("/v1/documents", params={"stage": "nope"}), 400, "stage must be")
    is_problem(http.get("/v1/documents", params={"cursor": "!!"}), 400, "cursor")
    is_problem(http.get("/v1/documents", params={"limit": 0}), 400, "limit")


@pytest.mark.parametrize(
    "moment", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "2026-01-01T00:00:00"]
)
def test_crafted_cursor_is_400_not_500(http: httpx.Client, moment: str) -> None:
    """A cursor in the API's own format whose time PostgreSQL cannot take (out of range
    once in UTC) or that has no zone."""
    raw = f"{moment}|{uuid.UUID(int=1)}".encode()
    cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    is_problem(http.get("/v1/documents", params={"cursor": cursor}), 400, "cursor")
    assert http.get("/", params={"cursor": cursor}).status_code == 400


def test_last_event_id_with_a_non_ascii_byte_is_400(http: httpx.Client) -> None:
    # b"\xb2" is "²" in latin-1: str.isdigit() says yes, int() says no.
    for raw in (b"\xb2", b"1\xb9", b"\xff"):
        is_problem(http.get("/v1/events", headers={b"Last-Event-ID": raw}), 400, "Last-Event-ID")


def test_stages_overview(http: httpx.Client) -> None:
    stages = http.get("/v1/stages").json()
    assert [s["stage"] for s in stages] == ["parse", "chunk", "vision", "embed", "index"]
    assert all(isinstance(s["providers"], list) and "workers" in s for s in stages)
    assert stages[0]["queued"] >= 3


def test_probes_metrics_and_openapi(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok", "events": True}
    assert http.get("/readyz").json() == {"status": "ready", "events": True}
    metrics = http.get("/metrics")
    assert 'ragline_queue_depth{stage="parse"}' in metrics.text
    spec = http.get("/v1/schema/openapi.json").json()
    assert {"/v1/documents", "/v1/documents/{doc}", "/v1/search", "/v1/events"} <= set(
        spec["paths"]
    )
    is_problem(http.get("/v1/nothing-here"), 404, "")


def test_openapi_describes_the_upload_body(http: httpx.Client) -> None:
    upload = http.get("/v1/schema/openapi.json").json()["paths"]["/v1/documents"]["post"]
    body = upload["requestBody"]["content"]
    assert body["multipart/form-data"]["schema"]["properties"]["file"]["format"] == "binary"
    assert body["application/octet-stream"]["schema"]["format"] == "binary"
    assert {"200", "202", "400", "413", "415", "422"} <= set(upload["responses"])
    assert "application/problem+json" in upload["responses"]["422"]["content"]


@pytest.mark.parametrize("doc", [str(uuid.UUID(int=9)), "not-a-uuid"])
def test_web_view_answers_html_for_an_unknown_document(http: httpx.Client, doc: str) -> None:
    page = http.get(f"/documents/{doc}")
    assert page.status_code == 404
    assert page.headers["content-type"].startswith("text/html"), page.headers
    assert "<!doctype html>" in page.text and "no document" in page.text


# -- events, then processing: retry, search, reprocess, delete -------------------------------


def read_events(server: Server, last_id: str | None, want: int) -> list[dict[str, Any]]:
    headers = {"Last-Event-ID": last_id} if last_id is not None else {}
    got: list[dict[str, Any]] = []
    with (
        server.client() as http,
        http.stream("GET", "/v1/events", headers=headers, timeout=30) as r,
    ):
        assert r.headers["content-type"].startswith("text/event-stream")
        event_id = None
        for line in r.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            if line.startswith("data: "):
                got.append({"id": event_id, **json.loads(line[6:])})
                if len(got) >= want:
                    break
    return got


def test_events_live_and_resumed(server: Server, http: httpx.Client, tmp_path: Path) -> None:
    live: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: live.extend(read_events(server, None, 1)))
    reader.start()
    # The stream is open once a heartbeat comment could have been sent; then upload.
    threading.Event().wait(1.0)
    path = tmp_path / "events-probe.pdf"
    path.write_bytes((SAMPLES / "sourdough.pdf").read_bytes() + b"\n% events probe\n")
    doc = raw_upload(http, path).json()
    reader.join(30)
    assert live and live[0]["document_id"] == doc["id"]
    assert live[0]["status"] == "pending" and live[0]["stage"] == "parse"
    assert live[0]["filename"] == "events-probe.pdf"
    # Resuming from before it replays it, from the table.
    replayed = read_events(server, str(int(live[0]["id"]) - 1), 1)
    assert replayed[0]["id"] == live[0]["id"]
    is_problem(http.get("/v1/events", headers={"Last-Event-ID": "x'; drop"}), 400, "Last-Event-ID")


@pytest.fixture(scope="module")
def processed(cli: Cli, http: httpx.Client, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A truncated PDF uploaded and every document worked on once; the broken one's id."""
    broken = write_truncated_pdf(tmp_path_factory.mktemp("broken") / "broken.pdf")
    broken_id: str = raw_upload(http, broken).json()["id"]
    result = cli.run("--exit-when-idle", timeout_s=110)
    assert result.code == 0, result
    return broken_id


def test_failed_document_detail_and_retry(http: httpx.Client, processed: str) -> None:
    doc = http.get(f"/v1/documents/{processed}").json()
    assert doc["status"] == "failed" and doc["stage"] == "parse"
    assert doc["error"].startswith("parse:") and "broken.pdf" in doc["error"]
    assert doc["jobs"][-1]["state"] == "failed" and doc["jobs"][-1]["last_error"]
    r = http.post(f"/v1/documents/{processed}/retry")
    assert r.status_code == 200 and r.json() == [{"document_id": processed, "stage": "parse"}]
    again = http.get(f"/v1/documents/{processed}").json()
    assert again["status"] == "pending" and again["waiting"]
    is_problem(http.post(f"/v1/documents/{processed}/retry"), 409, "no failed job")


def test_ready_document_counts_search_reprocess_delete(
    http: httpx.Client, processed: str, cli: Cli
) -> None:
    docs = http.get("/v1/documents", params={"status": "ready", "limit": 100}).json()["documents"]
    light = next(d for d in docs if d["filename"] == "lighthouses.pdf")
    detail = http.get(f"/v1/documents/{light['id']}").json()
    counts = detail["counts"]
    assert counts["pages"] >= 1 and counts["chunks"] >= 1 and counts["points"] == counts["chunks"]
    assert [j["stage"] for j in detail["jobs"]] == ["parse", "chunk", "vision", "embed", "index"]

    hits = http.get("/v1/search", params={"q": "lighthouse lens", "k": 3}).json()
    assert hits[0]["filename"] == "lighthouses.pdf" and hits[0]["document_id"] == light["id"]
    assert {"score", "text", "page_start", "page_end"} <= set(hits[0])
    is_problem(http.get("/v1/search", params={"q": " "}), 400, "q must not be empty")
    is_problem(http.get("/v1/search", params={"q": "x", "k": 1000}), 400, "k")

    r = http.post("/v1/reprocess", json={"from": "index", "ids": [light["id"]]})
    assert r.status_code == 202 and r.json()["reprocessing"][0]["generation"] == 2
    is_problem(http.post("/v1/reprocess", json={"from": "index"}), 400, "one of")
    is_problem(http.post("/v1/reprocess", json={"from": "nope", "all": True}), 400, "'from'")
    as_json = {"Content-Type": "application/json"}
    is_problem(http.post("/v1/reprocess", content=b"{not json", headers=as_json), 400, "")
    is_problem(http.post("/v1/reprocess", content=b"{not json"), 415, "application/json")

    files_before = len(stored_files(cli))
    assert http.delete(f"/v1/documents/{light['id']}").status_code == 204
    is_problem(http.get(f"/v1/documents/{light['id']}"), 404, "no document")
    assert len(stored_files(cli)) < files_before
    assert not any(p.parts[-2] == light["id"] for p in stored_files(cli))


# -- tokens ----------------------------------------------------------------------------------


def test_tokens_guard_the_api_and_never_reach_the_log(cli: Cli) -> None:
    secret = "s3cr3t-" + uuid.uuid4().hex
    with running_server(cli, RAGLINE_API_TOKENS=f"other,{secret}") as server:
        with server.client() as http:
            missing = http.get("/v1/stages")
            is_problem(missing, 401, "missing bearer token")
            assert missing.headers["www-authenticate"].startswith("Bearer")
            is_problem(
                http.get("/v1/stages", headers={"Authorization": "Bearer nope"}), 401, "wrong"
            )
            ok = http.get("/v1/stages", headers={"Authorization": f"Bearer {secret}"})
            assert ok.status_code == 200
            assert http.get("/healthz").status_code == 200
            page = http.get("/")
            assert page.status_code == 303 and page.headers["location"].startswith("/login")
            login = http.post("/login", data={"token": secret, "next": "/stages"})
            assert login.status_code == 303 and login.headers["location"] == "/stages"
            assert "httponly" in login.headers["set-cookie"].lower()
            assert http.get("/stages").status_code == 200  # the cookie is kept
            assert http.post("/login", data={"token": "nope"}).status_code == 401
            # SIGTERM with an event stream open: the stream ends, the server exits cleanly.
            auth = {"Authorization": f"Bearer {secret}"}
            with http.stream("GET", "/v1/events", headers=auth) as stream:
                lines = stream.iter_lines()
                assert next(lines).startswith(": ragline")
                server.proc.signal(signal.SIGTERM)
                rest = list(lines)  # returns once the server ends the stream
            result = server.proc.wait(30)
        # uvicorn re-raises the signal once it has shut down, so managers see it.
        assert result.code == -signal.SIGTERM, result
        assert "Application shutdown complete" in result.err
        assert all(not line.startswith("data:") for line in rest)
        log = server.output()
    assert secret not in log and "nope" not in log and "Traceback" not in log


def test_refuses_to_bind_beyond_localhost_without_tokens(cli: Cli) -> None:
    result = cli.run("serve", "--host", "0.0.0.0", "--port", "1")
    assert result.code == 2, result
    assert "without RAGLINE_API_TOKENS" in result.err and "Traceback" not in result.err
