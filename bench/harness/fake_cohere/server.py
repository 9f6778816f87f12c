"""The fake Cohere server: its lifecycle, its fault script and its answers."""

from __future__ import annotations

import base64
import collections
import random
import threading
import time
import uuid
from collections.abc import Iterable
from types import TracebackType
from typing import Any, Self

import msgspec
import numpy as np

from bench.harness.fake_cohere.handler import BadRequest, Handler, Server
from bench.harness.fake_cohere.models import Bucket, Fault, FaultRates, Stats, bump, fake_vector


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
        self._bucket = Bucket(rate_limit_per_s) if rate_limit_per_s else None
        self._stopping = threading.Event()
        self.stats = Stats()
        self._httpd = Server((host, port), Handler)
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
            bump(self.stats.requests, endpoint)

    def next_fault(self, endpoint: str) -> Fault | None:
        """Count the request; return the next scripted fault, else a random one, else None."""
        with self._lock:
            bump(self.stats.requests, endpoint)
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
            bump(self.stats.statuses, status)

    def sleep(self, delay_s: float) -> None:
        self._stopping.wait(delay_s)

    def embed_response(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = [str(t) for t in body.get("texts") or []]
        model = str(body.get("model", ""))
        dims = int(body.get("output_dimension") or self.dims)
        with self._lock:
            self.stats.texts_embedded += len(texts)
            self.stats.max_batch = max(self.stats.max_batch, len(texts))
            bump(self.stats.input_types, body.get("input_type"))
            bump(self.stats.models, model)
            bump(self.stats.output_dimensions, body.get("output_dimension"))
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

    def rerank_response(self, body: Any) -> dict[str, Any]:
        """Relevance as the share of the query's words a document holds (ties: the
        order given), so a test can tell the reranker's order from the fused one."""
        if not isinstance(body, dict) or not isinstance(body.get("documents"), list):
            raise BadRequest("documents: expected a list of strings")
        query = set(str(body.get("query", "")).lower().split())
        documents = [str(d) for d in body["documents"]]
        top_n = int(body.get("top_n") or len(documents))
        with self._lock:
            self.stats.reranked += len(documents)
            bump(self.stats.models, str(body.get("model", "")))
        scores = [len(query & set(d.lower().split())) / max(len(query), 1) for d in documents]
        order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))[:top_n]
        return {
            "id": str(uuid.uuid4()),
            "results": [{"index": i, "relevance_score": scores[i]} for i in order],
            "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}},
        }

    def chat_response(self, image: bytes, media_type: str, model: str) -> dict[str, Any]:
        with self._lock:
            self.stats.images_described += 1
            bump(self.stats.models, model)
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
