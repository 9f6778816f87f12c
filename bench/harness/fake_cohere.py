"""A local Cohere-compatible HTTP server for tests, benchmarks and chaos runs.

Real HTTP on 127.0.0.1 in a background thread, speaking just enough of Cohere's v2 API
for the ``cohere`` SDK to parse its answers:

- ``POST /v2/embed``: deterministic unit vectors derived from a hash of (model, text), so
  the same text always maps to the same vector (see :func:`fake_vector`).
- ``POST /v2/chat``: describes the image it was sent ("image of N bytes (image/png)").
- ``GET /_stats``: the counters as JSON; ``POST /_faults`` appends scripted faults (a JSON
  list of :class:`Fault` objects); ``POST /_reset`` clears counters and faults;
  ``POST /_outage`` with ``{"status": 503}`` answers every call with that status until
  ``{"status": null}`` ends the outage (:meth:`FakeCohere.outage` in-process).

Gateways that differ from Cohere: ``float_only`` answers only ``float`` embeddings,
whatever was asked; ``reject_base64`` answers 400 to a request for ``base64``.

Faults are injected per test: a script consumed in order (:class:`Fault`) and/or random
ones drawn from a seeded generator (:class:`FaultRates`). A server-side rate limit can
answer 429 like the real API. In tests::

    with FakeCohere(dims=64, faults=[Fault(status=500)]) as server:
        client = cohere.AsyncClientV2(api_key="test", base_url=server.base_url)

Standalone, for chaos runs with several worker processes::

    python -m bench.harness.fake_cohere --port 0 --error-rate 0.2 --rate-429 0.1
"""

from __future__ import annotations

import argparse
import base64
import binascii
import collections
import contextlib
import hashlib
import json
import random
import signal
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

import msgspec
import numpy as np

ENDPOINTS = ("embed", "chat")


def fake_vector(text: str, dims: int, model: str = "embed-v4.0") -> list[float]:
    """The unit vector the fake server returns for ``text``."""
    seed = int.from_bytes(hashlib.sha256(f"{model}\0{text}".encode()).digest()[:8], "big")
    vec = np.random.default_rng(seed).standard_normal(dims)
    return [float(x) for x in vec / np.linalg.norm(vec)]


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """One scripted misbehaviour, used by the next matching request.

    ``status`` answers with that HTTP status (``retry_after_s`` adds a Retry-After header);
    ``delay_s`` waits first (then answers normally unless ``status``/``reset`` is set);
    ``reset`` closes the socket without any response. ``endpoint`` limits the fault to
    ``"embed"`` or ``"chat"``; None matches either.
    """

    status: int | None = None
    retry_after_s: float | None = None
    delay_s: float = 0.0
    reset: bool = False
    endpoint: str | None = None
    message: str | None = None


class FaultRates(msgspec.Struct, frozen=True, kw_only=True):
    """Random faults, each a probability per request, drawn from ``seed``."""

    error_500: float = 0.0
    rate_429: float = 0.0
    reset: float = 0.0
    slow: float = 0.0
    slow_s: float = 5.0
    retry_after_s: float = 1.0
    seed: int = 0


class Stats(msgspec.Struct, kw_only=True):
    """Counters, all since start or the last reset."""

    requests: dict[str, int] = msgspec.field(default_factory=dict)
    statuses: dict[str, int] = msgspec.field(default_factory=dict)
    texts_embedded: int = 0
    max_batch: int = 0
    images_described: int = 0
    rate_limited: int = 0
    input_types: dict[str, int] = msgspec.field(default_factory=dict)
    models: dict[str, int] = msgspec.field(default_factory=dict)
    output_dimensions: dict[str, int] = msgspec.field(default_factory=dict)
    #: Wall-clock time (time.time()) of the first and the last embed/chat request.
    first_request_at: float = 0.0
    last_request_at: float = 0.0
    #: Wall-clock times of the requests an outage answered.
    outage_requests_at: list[float] = msgspec.field(default_factory=list)


def _bump(counter: dict[str, int], key: object) -> None:
    counter[str(key)] = counter.get(str(key), 0) + 1


class _Bucket:
    """Token bucket for the optional server-side rate limit (not thread-safe alone)."""

    def __init__(self, rate_per_s: float) -> None:
        self.rate = rate_per_s
        self.tokens = max(1.0, rate_per_s)
        self.stamp = time.monotonic()

    def take(self) -> float | None:
        """None if a request may pass, else the seconds until one may."""
        now = time.monotonic()
        self.tokens = min(max(1.0, self.rate), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate


class FakeCohere:
    """The server. Thread-safe: every counter and the fault script sit behind one lock."""

    def __init__(
        self,
        *,
        dims: int = 1024,
        faults: Iterable[Fault] = (),
        rates: FaultRates | None = None,
        rate_limit_per_s: float | None = None,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        float_only: bool = False,
        reject_base64: bool = False,
    ) -> None:
        self.dims = dims
        self.float_only = float_only
        self.reject_base64 = reject_base64
        #: While set, every embed/chat call is answered with this status.
        self.outage_status: int | None = None
        #: time.monotonic() of each call answered by an outage.
        self.outage_calls: list[float] = []
        self.rates = rates or FaultRates()
        self.api_key = api_key
        self._lock = threading.Lock()
        self._script: collections.deque[Fault] = collections.deque(faults)
        self._rng = random.Random(self.rates.seed)
        self._bucket = _Bucket(rate_limit_per_s) if rate_limit_per_s else None
        self._stopping = threading.Event()
        self.stats = Stats()
        self._httpd = _Server((host, port), _Handler)
        self._httpd.fake = self
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # cuts every injected delay short
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ control

    def add_faults(self, faults: Iterable[Fault]) -> None:
        with self._lock:
            self._script.extend(faults)

    def outage(self, status: int | None = 503) -> None:
        """Start (``status``) or end (None) a full outage."""
        with self._lock:
            self.outage_status = status

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.stats = Stats()

    def snapshot(self) -> Stats:
        """A copy of the counters, safe to read while requests run."""
        with self._lock:
            return msgspec.json.decode(msgspec.json.encode(self.stats), type=Stats)

    def requests_to(self, endpoint: str) -> int:
        with self._lock:
            return self.stats.requests.get(endpoint, 0)

    # ------------------------------------------------------------------ per request

    def count_request(self, endpoint: str) -> None:
        with self._lock:
            _bump(self.stats.requests, endpoint)

    def next_fault(self, endpoint: str) -> Fault | None:
        """Count the request; return the next scripted fault, else a random one, else None."""
        with self._lock:
            _bump(self.stats.requests, endpoint)
            now = time.time()
            self.stats.first_request_at = self.stats.first_request_at or now
            self.stats.last_request_at = now
            if self.outage_status is not None:
                self.outage_calls.append(time.monotonic())
                self.stats.outage_requests_at.append(now)
                return Fault(status=self.outage_status, message="service unavailable (outage)")
            for i, fault in enumerate(self._script):
                if fault.endpoint in (None, endpoint):
                    del self._script[i]
                    return fault
            return self._random_fault() or self._rate_fault()

    def _random_fault(self) -> Fault | None:
        r, x = self.rates, self._rng.random()
        if x < r.error_500:
            return Fault(status=500)
        x -= r.error_500
        if x < r.rate_429:
            return Fault(status=429, retry_after_s=r.retry_after_s)
        x -= r.rate_429
        if x < r.reset:
            return Fault(reset=True)
        x -= r.reset
        return Fault(delay_s=r.slow_s) if x < r.slow else None

    def _rate_fault(self) -> Fault | None:
        wait_s = self._bucket.take() if self._bucket else None
        if wait_s is None:
            return None
        self.stats.rate_limited += 1
        return Fault(status=429, retry_after_s=round(wait_s, 3), message="rate limit exceeded")

    def count_status(self, status: int | str) -> None:
        with self._lock:
            _bump(self.stats.statuses, status)

    def sleep(self, delay_s: float) -> None:
        self._stopping.wait(delay_s)

    def embed_response(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = [str(t) for t in body.get("texts") or []]
        model = str(body.get("model", ""))
        dims = int(body.get("output_dimension") or self.dims)
        with self._lock:
            self.stats.texts_embedded += len(texts)
            self.stats.max_batch = max(self.stats.max_batch, len(texts))
            _bump(self.stats.input_types, body.get("input_type"))
            _bump(self.stats.models, model)
            _bump(self.stats.output_dimensions, body.get("output_dimension"))
        vectors = [fake_vector(t, dims, model) for t in texts]
        embeddings: dict[str, Any] = {}
        kinds = body.get("embedding_types") or ["float"]
        if self.reject_base64 and "base64" in kinds:
            raise BadRequest("embedding_types: base64 is not supported by this gateway")
        for kind in ["float"] if self.float_only else kinds:
            if kind == "float":
                embeddings["float"] = vectors
            elif kind == "base64":  # float32 little-endian bytes, as Cohere documents it
                embeddings["base64"] = [
                    base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode() for v in vectors
                ]
            else:
                raise BadRequest(f"embedding type {kind!r} is not supported by this fake")
        return {
            "id": str(uuid.uuid4()),
            "response_type": "embeddings_by_type",
            "embeddings": embeddings,
            "texts": texts,
            "meta": {
                "api_version": {"version": "2"},
                "billed_units": {"input_tokens": sum(len(t.split()) for t in texts)},
            },
        }

    def chat_response(self, image: bytes, media_type: str, model: str) -> dict[str, Any]:
        with self._lock:
            self.stats.images_described += 1
            _bump(self.stats.models, model)
        text = f"image of {len(image)} bytes ({media_type})"
        return {
            "id": str(uuid.uuid4()),
            "finish_reason": "COMPLETE",
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
            "usage": {
                "billed_units": {"input_tokens": 10, "output_tokens": len(text.split())},
                "tokens": {"input_tokens": 10, "output_tokens": len(text.split())},
            },
        }


class _Server(ThreadingHTTPServer):
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like the real API; needs Content-Length
    # Headers and body go out in two writes: without this, Nagle plus delayed ACKs add
    # ~40 ms to every response.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests and chaos runs read /_stats instead

    def do_GET(self) -> None:
        if self.path == "/_stats":
            self._send(200, msgspec.to_builtins(self.server.fake.snapshot()), count=False)
        else:
            self._send(404, {"message": f"no route {self.path}"}, count=False)

    def do_POST(self) -> None:
        endpoint = {"/v2/embed": "embed", "/v2/chat": "chat"}.get(self.path.split("?")[0])
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
                self._send(200, fake.embed_response(_embed_body(body)))
            else:
                image, media_type = _image_from_chat(body)
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


def _embed_body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("texts"), list):
        raise BadRequest("texts must be a list of strings")
    if not body.get("model") or body.get("input_type") is None:
        raise BadRequest("model and input_type are required")
    if len(body["texts"]) > 96:
        raise BadRequest(f"too many texts: {len(body['texts'])} > 96")
    return body


def _image_from_chat(body: Any) -> tuple[bytes, str]:
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


# ---------------------------------------------------------------------- standalone


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.harness.fake_cohere", description=__doc__)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--dims", type=int, default=1024)
    p.add_argument("--error-rate", type=float, default=0.0, help="probability of a 500")
    p.add_argument("--rate-429", type=float, default=0.0, help="probability of a 429")
    p.add_argument("--reset-rate", type=float, default=0.0, help="probability of a reset")
    p.add_argument("--slow-rate", type=float, default=0.0, help="probability of a slow answer")
    p.add_argument("--slow-s", type=float, default=5.0)
    p.add_argument("--retry-after-s", type=float, default=1.0)
    p.add_argument("--rate-limit-per-s", type=float, default=None)
    p.add_argument("--api-key", default=None, help="require this bearer token")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--float-only", action="store_true", help="answer only float embeddings")
    p.add_argument("--reject-base64", action="store_true", help="400 to base64 requests")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    rates = FaultRates(
        error_500=args.error_rate,
        rate_429=args.rate_429,
        reset=args.reset_rate,
        slow=args.slow_rate,
        slow_s=args.slow_s,
        retry_after_s=args.retry_after_s,
        seed=args.seed,
    )
    server = FakeCohere(
        dims=args.dims,
        rates=rates,
        rate_limit_per_s=args.rate_limit_per_s,
        api_key=args.api_key,
        host=args.host,
        port=args.port,
        float_only=args.float_only,
        reject_base64=args.reject_base64,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with server:
        print(server.base_url, flush=True)  # the first line is the URL, for scripts to read
        stop.wait()
    print(json.dumps(msgspec.to_builtins(server.snapshot())), file=sys.stderr)


@contextlib.contextmanager
def running(**kwargs: Any) -> Iterator[FakeCohere]:
    """``with running(dims=8) as server:`` — a FakeCohere started for the block."""
    with FakeCohere(**kwargs) as server:
        yield server


if __name__ == "__main__":
    main()
