"""The fake Cohere server's HTTP side: routing, request bodies, writing answers."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import socket
import struct
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import msgspec

from bench.harness.fake_cohere.models import Fault

if TYPE_CHECKING:
    from bench.harness.fake_cohere.server import FakeCohere


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # Stopping must not wait for handlers stuck writing to clients that went away.
    block_on_close = False
    fake: FakeCohere

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that time out or hang up mid-request are part of the job, not news.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class BadRequest(Exception):
    """The request body is not what the API expects (answered with 400)."""


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real API; needs Content-Length
    # Headers and body go out in two writes: without this, Nagle plus delayed ACKs add
    # ~40 ms to every response.
    disable_nagle_algorithm = True
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and chaos runs read /_stats instead

    def do_GET(self) -> None:
        if self.path == "/_stats":
            self._send(200, msgspec.to_builtins(self.server.fake.snapshot()), count=False)
        else:
            self._send(404, {"message": f"no route {self.path}"}, count=False)

    def do_POST(self) -> None:
        routes = {"/v2/embed": "embed", "/v2/chat": "chat", "/v2/rerank": "rerank"}
        endpoint = routes.get(self.path.split("?")[0])
        try:
            body = self._read_json()
        except BadRequest as exc:
            self._send(400, {"message": str(exc)})
            return
        if endpoint is None:
            self._control(body)
        elif self._authorized():
            self._serve(endpoint, body)

    def _control(self, body: Any) -> None:
        fake = self.server.fake
        if self.path == "/_faults":
            fake.add_faults(msgspec.convert(body, list[Fault]))
            self._send(200, {"ok": True}, count=False)
        elif self.path == "/_reset":
            fake.reset()
            self._send(200, {"ok": True}, count=False)
        elif self.path == "/_outage":
            fake.outage(body.get("status") if isinstance(body, dict) else None)
            self._send(200, {"ok": True}, count=False)
        else:
            self._send(404, {"message": f"no route {self.path}"}, count=False)

    def _authorized(self) -> bool:
        expected = self.server.fake.api_key
        if expected is None or self.headers.get("Authorization") == f"Bearer {expected}":
            return True
        self.server.fake.count_request("unauthorized")
        self._send(401, {"message": "invalid api token"})
        return False

    def _serve(self, endpoint: str, body: Any) -> None:
        fake = self.server.fake
        fault = fake.next_fault(endpoint)
        if fault is not None and fault.delay_s:
            fake.sleep(fault.delay_s)
        if fault is not None and fault.reset:
            self._reset()
        elif fault is not None and fault.status is not None:
            self._send_fault(fault)
        else:
            self._answer(endpoint, body)

    def _answer(self, endpoint: str, body: Any) -> None:
        fake = self.server.fake
        try:
            if endpoint == "embed":
                self._send(200, fake.embed_response(embed_body(body)))
            elif endpoint == "rerank":
                self._send(200, fake.rerank_response(body))
            else:
                image, media_type = image_from_chat(body)
                self._send(200, fake.chat_response(image, media_type, str(body.get("model"))))
        except BadRequest as exc:
            self._send(400, {"message": str(exc)})

    def _send_fault(self, fault: Fault) -> None:
        status = fault.status or 500
        headers = {}
        if fault.retry_after_s is not None:
            headers["Retry-After"] = f"{fault.retry_after_s:g}"
        message = fault.message or f"injected {status} {HTTPStatus(status).phrase.lower()}"
        self._send(status, {"message": message}, headers=headers)

    def _reset(self) -> None:
        self.server.fake.count_status("reset")
        # SO_LINGER 0: close() sends RST instead of FIN, like a dying proxy.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.close()

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            raise BadRequest(f"invalid JSON body: {exc}") from exc

    def _send(
        self,
        status: int,
        payload: Any,
        *,
        headers: dict[str, str] | None = None,
        count: bool = True,
    ) -> None:
        if count:
            self.server.fake.count_status(status)
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client gave up (timeout): nothing to tell it


def embed_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("texts"), list):
        raise BadRequest("texts must be a list of strings")
    if not body.get("model") or body.get("input_type") is None:
        raise BadRequest("model and input_type are required")
    if len(body["texts"]) > 96:
        raise BadRequest(f"too many texts: {len(body['texts'])} > 96")
    return body


def image_from_chat(body: Any) -> tuple[bytes, str]:
    """The first data-URI image in the last user message."""
    try:
        content = body["messages"][-1]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise BadRequest("messages[-1].content is required") from exc
    for item in content if isinstance(content, list) else []:
        url = (item.get("image_url") or {}).get("url", "") if isinstance(item, dict) else ""
        if url.startswith("data:") and ";base64," in url:
            header, data = url[5:].split(";base64,", 1)
            try:
                return base64.b64decode(data, validate=True), header
            except binascii.Error as exc:
                raise BadRequest("image_url is not valid base64") from exc
    raise BadRequest("no image_url content with a base64 data URI")
